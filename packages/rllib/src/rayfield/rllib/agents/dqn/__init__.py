"""DQN and Ape-X DQN (classic API): ``from rayfield.rllib.agents.dqn import DQNTrainer,
ApexTrainer, DEFAULT_CONFIG, APEX_DEFAULT_CONFIG``."""

from __future__ import annotations

from rayfield.rllib.agents.dqn.apex import APEX_DEFAULT_CONFIG, ApexAgent, ApexTrainer
from rayfield.rllib.agents.dqn.dqn import (
    DEFAULT_CONFIG,
    DQNAgent,
    DQNTorchModel,
    DQNTorchPolicy,
    DQNTrainer,
)

__all__ = [
    "APEX_DEFAULT_CONFIG",
    "DEFAULT_CONFIG",
    "ApexAgent",
    "ApexTrainer",
    "DQNAgent",
    "DQNTorchModel",
    "DQNTorchPolicy",
    "DQNTrainer",
]
