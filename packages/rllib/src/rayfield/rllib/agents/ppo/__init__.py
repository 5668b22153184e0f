"""PPO (classic API): ``from rayfield.rllib.agents.ppo import PPOTrainer, DEFAULT_CONFIG``."""

from __future__ import annotations

from rayfield.rllib.agents.ppo.ppo import (
    DEFAULT_CONFIG,
    PPOAgent,
    PPOTorchPolicy,
    PPOTrainer,
)

__all__ = ["DEFAULT_CONFIG", "PPOAgent", "PPOTorchPolicy", "PPOTrainer"]
