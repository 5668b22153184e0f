"""Ape-X DQN (Ray 2 API): ``ApexDQNConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.dqn.apex import ApexTrainer as ApexDQN
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class ApexDQNConfig(AlgorithmConfig):
    """The config builder of Ape-X DQN."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or ApexDQN)


__all__ = ["ApexDQN", "ApexDQNConfig"]
