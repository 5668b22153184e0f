"""BC (Ray 2 API): ``BCConfig().environment("CartPole-v1").offline_data(input_="/data")
.build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.marwil import BCTrainer as BC
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class BCConfig(AlgorithmConfig):
    """The config builder of BC."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or BC)


__all__ = ["BC", "BCConfig"]
