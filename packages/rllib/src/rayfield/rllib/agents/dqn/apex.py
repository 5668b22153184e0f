"""Ape-X DQN: DQN (double Q, dueling, 3-step returns) on distributed prioritized
experience replay (``--run APEX``).

Rollout workers (the paper's actors) sample with fixed, different exploration rates
(``per_worker_exploration``: worker ``i`` of ``N`` acts epsilon-greedily with
``eps_i = 0.4 ** (1 + i / (N - 1) * 7)``, `per_worker_epsilon`), compute the initial
priorities of their rows themselves (``worker_side_prioritization``: ``|td_error| +
prioritized_replay_eps`` under their copy of the networks) and send their batches to
``num_replay_buffer_shards`` replay shards (rayfield actors, no CPU of their own). A
learner thread in the driver learns on ``train_batch_size``-row batches replayed from
the shards and sends back the rows' new priorities; a worker gets the learner's weights
each time it has sampled ``max_weight_sync_delay`` steps. The target network is copied
from the online one every ``target_network_update_freq`` steps *trained* (Ape-X counts
the learner's steps, not the actors'); no replay happens before ``learning_starts`` steps
are sampled. Data flow: `rayfield.rllib.optimizers.async_replay_optimizer`.

The result's episode statistics are those of the third of the workers that explore
least (with ``per_worker_exploration``, as RLlib reports them: the others' epsilon is
up to 0.4), else of every worker. ``num_workers: 0`` runs the same data flow in one
process (the local worker samples, shards are plain objects, one learning step per
sampled batch) for tests.

Keys (besides DQN's): ``optimizer.num_replay_buffer_shards``,
``optimizer.max_weight_sync_delay``, ``optimizer.debug`` (accepted; no effect).

Sources:
    Horgan, Quan, Budden, Barth-Maron, Hessel, van Hasselt, Silver, "Distributed
    Prioritized Experience Replay", ICLR 2018, arXiv:1803.00933 (section 3 the
    architecture, Algorithms 1 and 2 the actor and learner, section 4.1 the
    per-actor epsilons).
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.dqn.dqn import DEFAULT_CONFIG as DQN_CONFIG
from rayfield.rllib.agents.dqn.dqn import DQNTrainer
from rayfield.rllib.optimizers.async_replay_optimizer import AsyncReplayOptimizer
from rayfield.rllib.utils.config import NumberRange, check_ranges, merge_dicts

APEX_OPTIMIZER_DEFAULTS = {
    "max_weight_sync_delay": 400,
    "num_replay_buffer_shards": 4,
    "debug": False,
}


def apex_config(base: dict[str, Any]) -> dict[str, Any]:
    """`base` (DQN's or DDPG's defaults) with the reference's Ape-X settings: the
    ``optimizer`` keys, 3-step returns, 32 workers with per-worker exploration and
    worker-side priorities, 2,000,000 rows of replay, 50,000 steps before learning,
    512-row batches, 50-step fragments, a target update every 500,000 trained rows."""
    return merge_dicts(
        base,
        {
            "optimizer": merge_dicts(base["optimizer"], APEX_OPTIMIZER_DEFAULTS),
            "n_step": 3,
            "num_gpus": 0,
            "num_workers": 32,
            "buffer_size": 2000000,
            "learning_starts": 50000,
            "train_batch_size": 512,
            "rollout_fragment_length": 50,
            "target_network_update_freq": 500000,
            "timesteps_per_iteration": 25000,
            "per_worker_exploration": True,
            "worker_side_prioritization": True,
            "min_iter_time_s": 30,
        },
    )


APEX_DEFAULT_CONFIG = apex_config(DQN_CONFIG)

APEX_RANGES = {
    "learning_starts": NumberRange(low=0, integer=True),
    "buffer_size": NumberRange(low=1, integer=True),
    "target_network_update_freq": NumberRange(low=0, integer=True),
    "train_batch_size": NumberRange(low=1, integer=True),
}
_OPTIMIZER_RANGES = {
    "max_weight_sync_delay": NumberRange(low=1, integer=True),
    "num_replay_buffer_shards": NumberRange(low=1, integer=True),
}


class ApexExecution:
    """What Ape-X DQN and Ape-X DDPG add to their base trainers: the config checks, the
    `AsyncReplayOptimizer`, and target updates counted in trained steps."""

    config: dict[str, Any]
    workers: Any
    optimizer: Any
    _last_target_update: int

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """The base trainer's checks, then the Ape-X keys: `APEX_RANGES`, the
        ``optimizer`` keys (only
        ``max_weight_sync_delay``, ``num_replay_buffer_shards``, ``debug``), no
        multi-agent policies.

        Raises:
            ConfigTypeError: a number of the wrong type.
            ValueError: a number out of range, an unknown ``optimizer`` key, more
                shards than ``buffer_size`` rows, or ``multiagent.policies``.
        """
        super().validate_config(config)  # type: ignore[misc]
        check_ranges(config, APEX_RANGES)
        opt = config["optimizer"]
        unknown = sorted(set(opt) - set(APEX_OPTIMIZER_DEFAULTS))
        if unknown:
            raise ValueError(
                f"unknown Ape-X optimizer key(s) {unknown}: the optimizer takes "
                f"{sorted(APEX_OPTIMIZER_DEFAULTS)}"
            )
        check_ranges(opt, _OPTIMIZER_RANGES)
        if config["buffer_size"] < opt["num_replay_buffer_shards"]:
            raise ValueError(
                f"buffer_size ({config['buffer_size']}) must be at least "
                f"optimizer.num_replay_buffer_shards ({opt['num_replay_buffer_shards']})"
            )
        if (config.get("multiagent") or {}).get("policies"):
            raise ValueError(
                "Ape-X here trains one policy: remove multiagent.policies (or use DQN/DDPG)"
            )

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = self.make_apex_optimizer(config)

    def make_apex_optimizer(self, config: dict[str, Any]) -> AsyncReplayOptimizer:
        """The optimizer; with ``per_worker_exploration`` only the last third of the
        remote workers (the least exploring; at least one) report episodes."""
        remote = self.workers.remote_workers()
        metrics_workers = None
        if config["per_worker_exploration"] and remote:
            metrics_workers = remote[-max(1, -(-len(remote) // 3)) :]
        opt = config["optimizer"]
        self._last_target_update = 0
        return AsyncReplayOptimizer(
            self.workers,
            learning_starts=config["learning_starts"],
            buffer_size=config["buffer_size"],
            prioritized_replay=config["prioritized_replay"],
            prioritized_replay_alpha=config["prioritized_replay_alpha"],
            prioritized_replay_beta=config["prioritized_replay_beta"],
            prioritized_replay_eps=config["prioritized_replay_eps"],
            train_batch_size=config["train_batch_size"],
            num_replay_buffer_shards=opt["num_replay_buffer_shards"],
            max_weight_sync_delay=opt["max_weight_sync_delay"],
            metrics_workers=metrics_workers,
            seed=config["seed"],
        )

    def training_step(self) -> dict[str, Any]:
        """One optimizer step, then the target networks' update once
        ``target_network_update_freq`` more rows have been trained on (0: never here;
        the policy updates its own targets, as DDPG's soft updates)."""
        worker = self.workers.local_worker()
        worker.set_global_vars({"timestep": self.optimizer.num_steps_sampled})
        stats = self.optimizer.step()
        freq = int(self.config["target_network_update_freq"])
        trained = self.optimizer.num_steps_trained
        if freq > 0 and trained - self._last_target_update >= freq:
            for pid in worker.policies_to_train:
                worker.policy_map[pid].update_target()
            self._last_target_update = trained
        return stats


class ApexTrainer(ApexExecution, DQNTrainer):
    """Ape-X DQN (see the module docstring)."""

    _name = "APEX"
    _default_config = APEX_DEFAULT_CONFIG


ApexAgent = ApexTrainer
APEX = ApexTrainer
