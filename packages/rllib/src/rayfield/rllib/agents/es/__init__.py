"""Evolution strategies (classic API): ``from rayfield.rllib.agents.es import ESTrainer``."""

from __future__ import annotations

from rayfield.rllib.agents.es.es import DEFAULT_CONFIG, ES, ESAgent, ESTrainer

__all__ = ["DEFAULT_CONFIG", "ES", "ESAgent", "ESTrainer"]
