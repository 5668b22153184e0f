"""PPO (Ray 2 API): ``PPOConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.ppo import PPOTrainer as PPO
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class PPOConfig(AlgorithmConfig):
    """The config builder of PPO."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or PPO)


__all__ = ["PPO", "PPOConfig"]
