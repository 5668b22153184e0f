"""DDPG and TD3 (classic API): ``from rayfield.rllib.agents.ddpg import DDPGTrainer,
TD3Trainer, DEFAULT_CONFIG, TD3_DEFAULT_CONFIG``."""

from __future__ import annotations

from rayfield.rllib.agents.ddpg.ddpg import DEFAULT_CONFIG, DDPGAgent, DDPGTrainer
from rayfield.rllib.agents.ddpg.ddpg_torch_policy import DDPGTorchPolicy
from rayfield.rllib.agents.ddpg.td3 import TD3_DEFAULT_CONFIG, TD3Trainer

__all__ = [
    "DEFAULT_CONFIG",
    "TD3_DEFAULT_CONFIG",
    "DDPGAgent",
    "DDPGTorchPolicy",
    "DDPGTrainer",
    "TD3Trainer",
]
