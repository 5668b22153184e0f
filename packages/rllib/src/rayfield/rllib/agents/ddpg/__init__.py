"""DDPG, TD3 and Ape-X DDPG (classic API): ``from rayfield.rllib.agents.ddpg import
DDPGTrainer, TD3Trainer, ApexDDPGTrainer, DEFAULT_CONFIG, TD3_DEFAULT_CONFIG``."""

from __future__ import annotations

from rayfield.rllib.agents.ddpg.apex import APEX_DDPG_DEFAULT_CONFIG, ApexDDPGTrainer
from rayfield.rllib.agents.ddpg.ddpg import DEFAULT_CONFIG, DDPGAgent, DDPGTrainer
from rayfield.rllib.agents.ddpg.ddpg_torch_policy import DDPGTorchPolicy
from rayfield.rllib.agents.ddpg.td3 import TD3_DEFAULT_CONFIG, TD3Trainer

__all__ = [
    "APEX_DDPG_DEFAULT_CONFIG",
    "DEFAULT_CONFIG",
    "TD3_DEFAULT_CONFIG",
    "ApexDDPGTrainer",
    "DDPGAgent",
    "DDPGTorchPolicy",
    "DDPGTrainer",
    "TD3Trainer",
]
