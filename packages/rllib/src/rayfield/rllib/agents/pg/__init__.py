"""PG (classic API): ``from rayfield.rllib.agents.pg import PGTrainer, DEFAULT_CONFIG``."""

from __future__ import annotations

from rayfield.rllib.agents.pg.pg import DEFAULT_CONFIG, PGAgent, PGTorchPolicy, PGTrainer

__all__ = ["DEFAULT_CONFIG", "PGAgent", "PGTorchPolicy", "PGTrainer"]
