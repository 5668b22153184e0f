"""ARS (Ray 2 API): ``ARSConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.ars import ARSTrainer as ARS
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class ARSConfig(AlgorithmConfig):
    """The config builder of ARS."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or ARS)


__all__ = ["ARS", "ARSConfig"]
