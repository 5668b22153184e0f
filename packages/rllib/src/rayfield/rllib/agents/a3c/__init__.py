"""A2C (classic API): ``from rayfield.rllib.agents.a3c import A2CTrainer``."""

from __future__ import annotations

from rayfield.rllib.agents.a3c.a2c import (
    A3C_CONFIG,
    DEFAULT_CONFIG,
    A2CAgent,
    A2CTrainer,
    A3CTorchPolicy,
)

__all__ = ["A3C_CONFIG", "DEFAULT_CONFIG", "A2CAgent", "A2CTrainer", "A3CTorchPolicy"]
