"""Ape-X DDPG (Ray 2 API): ``ApexDDPGConfig().environment("Pendulum-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.ddpg.apex import ApexDDPGTrainer as ApexDDPG
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class ApexDDPGConfig(AlgorithmConfig):
    """The config builder of Ape-X DDPG."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or ApexDDPG)


__all__ = ["ApexDDPG", "ApexDDPGConfig"]
