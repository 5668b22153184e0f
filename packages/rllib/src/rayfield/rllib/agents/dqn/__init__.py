"""DQN (classic API): ``from rayfield.rllib.agents.dqn import DQNTrainer, DEFAULT_CONFIG``."""

from __future__ import annotations

from rayfield.rllib.agents.dqn.dqn import (
    DEFAULT_CONFIG,
    DQNAgent,
    DQNTorchModel,
    DQNTorchPolicy,
    DQNTrainer,
)

__all__ = ["DEFAULT_CONFIG", "DQNAgent", "DQNTorchModel", "DQNTorchPolicy", "DQNTrainer"]
