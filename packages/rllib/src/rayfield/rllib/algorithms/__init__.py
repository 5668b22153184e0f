"""The Ray 2 API: ``rayfield.rllib.algorithms.<algo>.<Algo>Config().build()``."""

from __future__ import annotations

from rayfield.rllib.algorithms.algorithm import Algorithm
from rayfield.rllib.algorithms.algorithm_config import AlgorithmConfig

__all__ = ["Algorithm", "AlgorithmConfig"]
