"""IMPALA: actors sample asynchronously with slightly stale weights while one learner
trains on their batches, correcting for the lag with V-trace.

The rollout workers (actors) sample batches of ``rollout_fragment_length *
num_envs_per_worker`` steps, each with the weights it last received; the driver collects
them as they come (``rayfield.wait`` on the sample calls in flight), concatenates them into
``train_batch_size`` train batches and queues them for a learner thread in the driver's
process, which minimises the actor-critic loss on V-trace targets (`VTraceTorchPolicy`;
the targets in `vtrace`). See `AsyncSamplesOptimizer` for the data flow and the keys
``num_sgd_iter``, ``minibatch_buffer_size``, ``replay_proportion`` /
``replay_buffer_num_slots``, ``broadcast_interval``, ``learner_queue_size`` and
``max_sample_requests_in_flight_per_worker``. The learner thread needs no CPU of its own:
two rollout workers run on a 2-CPU ``rayfield.init(num_cpus=2)``.

Sources:
    Espeholt et al., "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
    Actor-Learner Architectures", ICML 2018, arXiv:1802.01561 (section 3 the
    architecture, section 4 V-trace: eq. 1 the targets, section 4.2 the loss).
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.optimizers.async_samples_optimizer import AsyncSamplesOptimizer
from rayfield.rllib.utils.config import NumberRange, check_ranges

DEFAULT_CONFIG = with_common_config(
    {
        # V-trace
        "vtrace": True,
        "vtrace_clip_rho_threshold": 1.0,
        "vtrace_clip_pg_rho_threshold": 1.0,
        # execution (see AsyncSamplesOptimizer)
        "rollout_fragment_length": 50,
        "train_batch_size": 500,
        "min_iter_time_s": 10,
        "num_workers": 2,
        "num_gpus": 0,
        "num_data_loader_buffers": 1,
        "minibatch_buffer_size": 1,
        "num_sgd_iter": 1,
        "replay_proportion": 0.0,
        "replay_buffer_num_slots": 0,
        "learner_queue_size": 16,
        "max_sample_requests_in_flight_per_worker": 2,
        "broadcast_interval": 1,
        "num_aggregation_workers": 0,
        # learning
        "grad_clip": 40.0,
        "opt_type": "adam",
        "lr": 0.0005,
        "lr_schedule": None,
        "decay": 0.99,
        "momentum": 0.0,
        "epsilon": 0.1,
        "vf_loss_coeff": 0.5,
        "entropy_coeff": 0.01,
        "_fake_sampler": False,
    }
)

IMPALA_RANGES = {
    "num_sgd_iter": NumberRange(low=1, integer=True),
    "minibatch_buffer_size": NumberRange(low=1, integer=True),
    "learner_queue_size": NumberRange(low=1, integer=True),
    "max_sample_requests_in_flight_per_worker": NumberRange(low=1, integer=True),
    "broadcast_interval": NumberRange(low=1, integer=True),
    "replay_proportion": NumberRange(low=0),
    "replay_buffer_num_slots": NumberRange(low=0, integer=True),
    "vf_loss_coeff": NumberRange(low=0),
}


class ImpalaTrainer(Trainer):
    """IMPALA (see the module docstring). Discrete and Box action spaces, feed-forward
    models. ``num_workers: 0`` samples on the local worker and learns in the same
    thread (no asynchrony), for tests."""

    _name = "IMPALA"
    _default_config = DEFAULT_CONFIG
    _policy: Any = "rayfield.rllib.agents.impala.vtrace_torch_policy.VTraceTorchPolicy"

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """Also: the execution keys' ranges, ``opt_type`` in adam / rmsprop, replay
        slots for ``replay_proportion``, no aggregation workers.

        Raises:
            ValueError: a value out of its range or a bad combination.
        """
        super().validate_config(config)
        check_ranges(config, IMPALA_RANGES)
        for key in ("vtrace_clip_rho_threshold", "vtrace_clip_pg_rho_threshold"):
            if not config[key] > 0:
                raise ValueError(f"{key} must be > 0, got {config[key]}")
        if config["opt_type"] not in ("adam", "rmsprop"):
            raise ValueError(f"opt_type must be 'adam' or 'rmsprop', got {config['opt_type']!r}")
        if config["replay_proportion"] > 0 and config["replay_buffer_num_slots"] == 0:
            raise ValueError("replay_proportion > 0 needs replay_buffer_num_slots > 0")
        if config["num_aggregation_workers"]:
            raise ValueError(
                "num_aggregation_workers is not supported: the driver aggregates; set it to 0"
            )

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = AsyncSamplesOptimizer(
            self.workers,
            train_batch_size=config["train_batch_size"],
            max_sample_requests_in_flight_per_worker=config[
                "max_sample_requests_in_flight_per_worker"
            ],
            broadcast_interval=config["broadcast_interval"],
            num_sgd_iter=config["num_sgd_iter"],
            minibatch_buffer_size=config["minibatch_buffer_size"],
            learner_queue_size=config["learner_queue_size"],
            replay_proportion=config["replay_proportion"],
            replay_buffer_num_slots=config["replay_buffer_num_slots"],
        )


ImpalaAgent = ImpalaTrainer
Impala = ImpalaTrainer
IMPALA = ImpalaTrainer
