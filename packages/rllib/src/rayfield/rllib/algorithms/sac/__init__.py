"""SAC (Ray 2 API): ``SACConfig().environment("Pendulum-v1").build()``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.sac import SACTrainer as SAC
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig


class SACConfig(AlgorithmConfig):
    """The config builder of SAC."""

    def __init__(self, algo_class: Any = None) -> None:
        super().__init__(algo_class or SAC)


__all__ = ["SAC", "SACConfig"]
