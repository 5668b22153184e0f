"""Advantage actor-critic, synchronous (A2C): one gradient step per batch on

    L = -mean(log pi(a|s) A) + vf_loss_coeff * 0.5 * mean((V(s) - V_t)^2) - entropy_coeff * mean(H)

with ``A`` from GAE (``lambda: 1.0`` gives n-step returns minus the value) and the
gradient's global norm clipped to ``grad_clip``. The samples of all rollout
workers are gathered and applied at once (the trainer's ``optimizer`` is a
`SyncSamplesOptimizer`): A3C's update without the asynchrony.
Losses are means over the batch (RLlib's TF version sums; the mean keeps the
learning rate independent of the batch size).

Sources:
    Mnih, Badia, Mirza, Graves, Lillicrap, Harley, Silver, Kavukcuoglu,
    "Asynchronous Methods for Deep Reinforcement Learning", ICML 2016.
"""

from __future__ import annotations

from typing import Any

import torch

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_gae_for_sample_batch
from rayfield.rllib.optimizers import SyncSamplesOptimizer
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy

A3C_CONFIG = with_common_config(
    {
        "use_critic": True,
        "use_gae": True,
        "lambda": 1.0,
        "grad_clip": 40.0,
        "lr": 0.0001,
        "lr_schedule": None,
        "vf_loss_coeff": 0.5,
        "entropy_coeff": 0.01,
        "rollout_fragment_length": 10,
        "min_iter_time_s": 5,
        "sample_async": True,
        "microbatch_size": None,
    }
)
DEFAULT_CONFIG = {
    **A3C_CONFIG,
    "rollout_fragment_length": 20,
    "min_iter_time_s": 10,
    "sample_async": False,
}


class A3CTorchPolicy(TorchPolicy):
    """The actor-critic policy of A2C/A3C."""

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        """GAE advantages; bootstraps from ``V(new_obs[-1])`` unless the fragment
        ends in a terminal state."""
        return compute_gae_for_sample_batch(self, sample_batch)

    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        cfg = self.config
        logits, _ = self.forward_train(model, train_batch)
        mean = self.reduce_mean
        dist = dist_class(logits, model)
        logp = dist.logp(train_batch[SampleBatch.ACTIONS])
        pi_err = -mean(logp * train_batch[Postprocessing.ADVANTAGES], train_batch)
        value_err = 0.5 * mean(
            (model.value_function() - train_batch[Postprocessing.VALUE_TARGETS]) ** 2, train_batch
        )
        entropy = mean(dist.entropy(), train_batch)
        total = pi_err + cfg["vf_loss_coeff"] * value_err - cfg["entropy_coeff"] * entropy
        total = model.custom_loss(total, train_batch)
        self.stats = {
            "policy_loss": pi_err.detach(),
            "vf_loss": value_err.detach(),
            "policy_entropy": entropy.detach(),
        }
        return total


class A2CTrainer(Trainer):
    """A2C (see the module docstring)."""

    _name = "A2C"
    _default_config = DEFAULT_CONFIG
    _policy = A3CTorchPolicy

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = SyncSamplesOptimizer(
            self.workers,
            train_batch_size=config["train_batch_size"],
            sample_async=config["sample_async"],
        )


A2CAgent = A2CTrainer
A2C = A2CTrainer
