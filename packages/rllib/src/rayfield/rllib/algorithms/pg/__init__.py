"""PG (Ray 2 API): ``PGConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.pg import PGTrainer as PG
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class PGConfig(AlgorithmConfig):
    """The config builder of PG."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or PG)


__all__ = ["PG", "PGConfig"]
