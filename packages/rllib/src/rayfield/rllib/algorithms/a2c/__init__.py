"""A2C (Ray 2 API): ``A2CConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.a3c import A2CTrainer as A2C
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class A2CConfig(AlgorithmConfig):
    """The config builder of A2C."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or A2C)


__all__ = ["A2C", "A2CConfig"]
