"""MARWIL and BC (classic API): ``from rayfield.rllib.agents.marwil import MARWILTrainer,
BCTrainer``."""

from __future__ import annotations

from rayfield.rllib.agents.marwil.bc import DEFAULT_CONFIG as BC_DEFAULT_CONFIG
from rayfield.rllib.agents.marwil.bc import BCTrainer
from rayfield.rllib.agents.marwil.marwil import DEFAULT_CONFIG, MARWILTorchPolicy, MARWILTrainer

__all__ = ["BC_DEFAULT_CONFIG", "DEFAULT_CONFIG", "BCTrainer", "MARWILTorchPolicy", "MARWILTrainer"]
