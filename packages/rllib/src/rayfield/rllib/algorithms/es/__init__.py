"""ES (Ray 2 API): ``ESConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.es import ESTrainer as ES
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class ESConfig(AlgorithmConfig):
    """The config builder of ES."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or ES)


__all__ = ["ES", "ESConfig"]
