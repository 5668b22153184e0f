"""Vanilla policy gradient (REINFORCE): ascend ``mean(log pi(a|s) * R)`` with ``R``
the discounted return from each step to the end of the episode fragment. The
trainer's ``optimizer`` is a `SyncSamplesOptimizer` (one gradient step per batch of
``train_batch_size`` steps).

Sources:
    Williams, "Simple Statistical Gradient-Following Algorithms for Connectionist
    Reinforcement Learning", Machine Learning 8, 1992.
    Sutton, McAllester, Singh, Mansour, "Policy Gradient Methods for Reinforcement
    Learning with Function Approximation", NeurIPS 1999.
"""

from __future__ import annotations

from typing import Any

import torch

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_advantages
from rayfield.rllib.optimizers import SyncSamplesOptimizer
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy

DEFAULT_CONFIG = with_common_config(
    {
        "num_workers": 0,
        "lr": 0.0004,
        "batch_mode": "complete_episodes",
    }
)


class PGTorchPolicy(TorchPolicy):
    """REINFORCE's policy: discounted returns as advantages, no critic."""

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        return compute_advantages(
            sample_batch, 0.0, self.config["gamma"], use_gae=False, use_critic=False
        )

    def extra_action_out(self, dist_inputs: torch.Tensor) -> dict[str, Any]:
        return {}

    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        logp = self.logp_of_actions(model, dist_class, train_batch)
        policy_loss = -self.reduce_mean(logp * train_batch[Postprocessing.ADVANTAGES], train_batch)
        total = model.custom_loss(policy_loss, train_batch)
        self.stats = {"policy_loss": policy_loss.detach()}
        return total


class PGTrainer(Trainer):
    """Policy gradient (see the module docstring)."""

    _name = "PG"
    _default_config = DEFAULT_CONFIG
    _policy = PGTorchPolicy

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = SyncSamplesOptimizer(
            self.workers,
            train_batch_size=config["train_batch_size"],
            sample_async=config["sample_async"],
        )


PGAgent = PGTrainer
PG = PGTrainer
