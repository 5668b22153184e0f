"""Augmented random search (classic API): ``from rayfield.rllib.agents.ars import ARSTrainer``."""

from __future__ import annotations

from rayfield.rllib.agents.ars.ars import ARS, DEFAULT_CONFIG, ARSAgent, ARSTrainer

__all__ = ["ARS", "DEFAULT_CONFIG", "ARSAgent", "ARSTrainer"]
