"""APPO (Ray 2 API): ``APPOConfig().environment("CartPole-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.ppo.appo import APPOTrainer as APPO
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class APPOConfig(AlgorithmConfig):
    """The config builder of APPO."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or APPO)


__all__ = ["APPO", "APPOConfig"]
