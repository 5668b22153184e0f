"""DQN (Ray 2 API): ``DQNConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.dqn import DQNTrainer as DQN
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class DQNConfig(AlgorithmConfig):
    """The config builder of DQN."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or DQN)


__all__ = ["DQN", "DQNConfig"]
