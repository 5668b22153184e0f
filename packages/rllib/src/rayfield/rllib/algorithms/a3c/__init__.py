"""A3C (Ray 2 API): ``A3CConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.a3c import A3CTrainer as A3C
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class A3CConfig(AlgorithmConfig):
    """The config builder of A3C."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or A3C)


__all__ = ["A3C", "A3CConfig"]
