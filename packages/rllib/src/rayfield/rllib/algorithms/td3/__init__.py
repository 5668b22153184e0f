"""TD3 (Ray 2 API): ``TD3Config().environment("Pendulum-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.ddpg import TD3Trainer as TD3
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class TD3Config(AlgorithmConfig):
    """The config builder of TD3."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or TD3)


__all__ = ["TD3", "TD3Config"]
