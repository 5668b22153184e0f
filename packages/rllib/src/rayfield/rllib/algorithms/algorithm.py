"""`Algorithm`: the Ray 2 name of `Trainer` (same class)."""

from __future__ import annotations

from rayfield.rllib.agents.trainer import Trainer

Algorithm = Trainer

__all__ = ["Algorithm"]
