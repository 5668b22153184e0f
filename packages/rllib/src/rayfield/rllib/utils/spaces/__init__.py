"""Extra gymnasium spaces: `Simplex` (probability vectors)."""

from __future__ import annotations

from rayfield.rllib.utils.spaces.simplex import Simplex

__all__ = ["Simplex"]
