"""IMPALA (Ray 2 API): ``IMPALAConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.impala import ImpalaTrainer as IMPALA
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class IMPALAConfig(AlgorithmConfig):
    """The config builder of IMPALA."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or IMPALA)


__all__ = ["IMPALA", "IMPALAConfig"]
