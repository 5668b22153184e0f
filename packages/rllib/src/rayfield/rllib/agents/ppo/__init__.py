"""PPO (classic API): ``from rayfield.rllib.agents.ppo import PPOTrainer, DEFAULT_CONFIG``.

`PPOTorchPolicy` is imported on first use, so importing the trainer does not load torch.
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.ppo.appo import APPOAgent, APPOTrainer
from rayfield.rllib.agents.ppo.ppo import DEFAULT_CONFIG, PPOAgent, PPOTrainer


def __getattr__(name: str) -> Any:
    if name == "PPOTorchPolicy":
        from rayfield.rllib.agents.ppo.ppo_torch_policy import PPOTorchPolicy

        return PPOTorchPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_CONFIG",
    "APPOAgent",
    "APPOTrainer",
    "PPOAgent",
    "PPOTorchPolicy",
    "PPOTrainer",
]
