"""MARWIL: monotonic advantage re-weighted imitation learning from batched historical
data (offline ``input``); with ``beta = 0`` it is behaviour cloning (`BCTrainer`).

Each episode fragment read gets its discounted return ``R_t`` (``postprocess_inputs``,
column ``advantages``, bootstrapped from the value of the last ``new_obs`` when the
fragment does not end in a terminal state). The loss on a batch is (Wang et al. 2018,
Algorithm 1 and eq. (6))::

    A_t   = R_t - V(s_t)
    c^2  <- c^2 + rate * (mean(A_t^2) - c^2)             (moving average, starts at 100)
    L_pi  = -mean( exp(beta * A_t / c) * log pi(a_t | s_t) )   (A_t without gradient)
    L_V   = 0.5 * mean( A_t^2 )
    L     = L_pi + vf_coeff * L_V

so actions with higher advantage are imitated more strongly; ``beta = 0`` weighs every
logged action the same, which is behaviour cloning (then no value function is trained).
The rate is ``moving_average_sqd_adv_norm_update_rate`` (1e-8, as RLlib) and the start
``moving_average_sqd_adv_norm_start`` (100).

The trainer's ``optimizer`` is a `SyncBatchReplayOptimizer`: each step reads one batch
per worker into a buffer of ``replay_buffer_size`` rows and learns once on
``train_batch_size`` rows drawn from it.

Sources:
    Wang, Xiong, Han, Zhang, Zhang, Liu, "Exponentially Weighted Imitation Learning for
    Batched Historical Data", NeurIPS 2018.
    RLlib 0.7, "Advantage Re-Weighted Imitation Learning (MARWIL)" (the default config).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_advantages
from rayfield.rllib.optimizers import SyncBatchReplayOptimizer
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy
from rayfield.rllib.utils.config import NumberRange, check_ranges

DEFAULT_CONFIG = with_common_config(
    {
        # point this at offline data (a directory, glob or list of files)
        "input": "sampler",
        "input_evaluation": ["is", "wis"],
        # the weight of the advantages in exp(beta * A / c); 0: behaviour cloning
        "beta": 1.0,
        # the weight of the value loss
        "vf_coeff": 1.0,
        # the moving average c^2 of the squared advantages: start and update rate
        "moving_average_sqd_adv_norm_start": 100.0,
        "moving_average_sqd_adv_norm_update_rate": 1e-8,
        # compute the discounted returns of the data read
        "postprocess_inputs": True,
        "batch_mode": "complete_episodes",
        "lr": 1e-4,
        "train_batch_size": 2000,
        "replay_buffer_size": 100000,
        "learning_starts": 0,
        "num_workers": 0,
    }
)

MARWIL_RANGES = {
    "beta": NumberRange(low=0),
    "vf_coeff": NumberRange(low=0),
    "moving_average_sqd_adv_norm_start": NumberRange(low=0),
    "moving_average_sqd_adv_norm_update_rate": NumberRange(low=0, high=1),
    "replay_buffer_size": NumberRange(low=1, integer=True),
    "learning_starts": NumberRange(low=0, integer=True),
}


class MARWILTorchPolicy(TorchPolicy):
    """MARWIL's policy: discounted returns in postprocessing, the advantage-weighted
    imitation loss (see the module docstring).

    Attributes:
        ma_adv_norm: the moving average ``c^2`` of the squared advantages.
    """

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        super().__init__(observation_space, action_space, config)
        self.ma_adv_norm = float(config["moving_average_sqd_adv_norm_start"])

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        """Add ``advantages``: the discounted return from each step (float32[T])."""
        ends = sample_batch.get(SampleBatch.TERMINATEDS)
        if ends is None:
            ends = sample_batch[SampleBatch.DONES]
        if ends[-1] or float(self.config["beta"]) == 0.0:
            last_r = 0.0
        else:
            last_r = float(self.value(sample_batch[SampleBatch.NEXT_OBS][-1:])[0])
        return compute_advantages(
            sample_batch, last_r, float(self.config["gamma"]), use_gae=False, use_critic=False
        )

    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        logp = self.logp_of_actions(model, dist_class, train_batch)
        beta = float(self.config["beta"])
        if beta == 0.0:
            policy_loss = -self.reduce_mean(logp, train_batch)
            self.stats = {"policy_loss": policy_loss.detach()}
            return model.custom_loss(policy_loss, train_batch)
        returns = train_batch[Postprocessing.ADVANTAGES]
        adv = returns - model.value_function()
        adv_sq = adv.detach().pow(2)
        rate = float(self.config["moving_average_sqd_adv_norm_update_rate"])
        self.ma_adv_norm += rate * (float(self.reduce_mean(adv_sq, train_batch)) - self.ma_adv_norm)
        weights = torch.exp(beta * adv.detach() / (1e-8 + np.sqrt(self.ma_adv_norm)))
        policy_loss = -self.reduce_mean(weights * logp, train_batch)
        vf_loss = 0.5 * self.reduce_mean(adv.pow(2), train_batch)
        total = policy_loss + float(self.config["vf_coeff"]) * vf_loss
        self.stats = {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "total_loss": total.detach(),
            "moving_average_sqd_adv_norm": torch.tensor(self.ma_adv_norm),
        }
        return model.custom_loss(total, train_batch)

    def extra_state(self) -> dict[str, Any]:
        return {"ma_adv_norm": self.ma_adv_norm}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.ma_adv_norm = float(state.get("ma_adv_norm", self.ma_adv_norm))


class MARWILTrainer(Trainer):
    """MARWIL (see the module docstring).

    Raises:
        ValueError: (at construction) ``beta``, ``vf_coeff`` or a size out of range.
    """

    _name = "MARWIL"
    _default_config = DEFAULT_CONFIG
    _policy = MARWILTorchPolicy

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        super().validate_config(config)
        check_ranges(config, MARWIL_RANGES)

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = SyncBatchReplayOptimizer(
            self.workers,
            learning_starts=config["learning_starts"],
            buffer_size=config["replay_buffer_size"],
            train_batch_size=config["train_batch_size"],
            seed=config["seed"],
        )


MARWIL = MARWILTrainer
