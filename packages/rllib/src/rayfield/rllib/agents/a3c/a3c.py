"""Asynchronous advantage actor-critic (A3C): every rollout worker samples a batch,
computes the actor-critic gradients on it (the loss of `A3CTorchPolicy`) and sends
them to the driver; the driver applies each gradient as it arrives and sends the
new weights back to that worker only, which then starts its next batch. A
training step applies ``optimizer["grads_per_step"]`` gradients (default 100).
Workers therefore compute gradients with weights a few updates old, as in the
paper's lock-free updates.

The trainer's ``optimizer`` is an `AsyncGradientsOptimizer`, which runs this.
With no remote workers the local worker samples and applies its own gradients
(synchronously). With several policies (``multiagent.policies``) a gradient is one
per trained policy, each applied to its own policy.

Sources:
    Mnih, Badia, Mirza, Graves, Lillicrap, Harley, Silver, Kavukcuoglu,
    "Asynchronous Methods for Deep Reinforcement Learning", ICML 2016.
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.a3c.a2c import A3C_CONFIG, A3CTorchPolicy
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.optimizers import AsyncGradientsOptimizer

DEFAULT_CONFIG = A3C_CONFIG


class A3CTrainer(Trainer):
    """A3C (see the module docstring)."""

    _name = "A3C"
    _default_config = DEFAULT_CONFIG
    _policy = A3CTorchPolicy

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = AsyncGradientsOptimizer(
            self.workers, grads_per_step=int(config["optimizer"].get("grads_per_step", 100))
        )


A3CAgent = A3CTrainer
A3C = A3CTrainer
