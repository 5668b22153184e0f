"""The classic (RLlib 0.7) API: ``rayfield.rllib.agents.<algo>.<Algo>Trainer``."""

from __future__ import annotations

from rayfield.rllib.agents.common_config import COMMON_CONFIG, with_common_config
from rayfield.rllib.agents.trainer import Trainer

__all__ = ["COMMON_CONFIG", "Trainer", "with_common_config"]
