"""DDPG (Ray 2 API): ``DDPGConfig().environment("Pendulum-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.ddpg import DDPGTrainer as DDPG
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class DDPGConfig(AlgorithmConfig):
    """The config builder of DDPG."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or DDPG)


__all__ = ["DDPG", "DDPGConfig"]
