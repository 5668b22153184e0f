"""A2C and A3C (classic API): ``from rayfield.rllib.agents.a3c import A2CTrainer, A3CTrainer``."""

from __future__ import annotations

from rayfield.rllib.agents.a3c.a2c import (
    A3C_CONFIG,
    DEFAULT_CONFIG,
    A2CAgent,
    A2CTrainer,
    A3CTorchPolicy,
)
from rayfield.rllib.agents.a3c.a3c import A3CAgent, A3CTrainer

__all__ = [
    "A3C_CONFIG",
    "DEFAULT_CONFIG",
    "A2CAgent",
    "A2CTrainer",
    "A3CAgent",
    "A3CTorchPolicy",
    "A3CTrainer",
]
