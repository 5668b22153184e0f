"""MARWIL (Ray 2 API): ``MARWILConfig().environment("CartPole-v1").offline_data(
input_="/data").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.marwil import MARWILTrainer as MARWIL
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class MARWILConfig(AlgorithmConfig):
    """The config builder of MARWIL."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or MARWIL)


__all__ = ["MARWIL", "MARWILConfig"]
