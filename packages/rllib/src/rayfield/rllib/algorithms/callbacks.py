"""Ray 2 location of `DefaultCallbacks`."""

from __future__ import annotations

from rayfield.rllib.evaluation.callbacks import DefaultCallbacks

__all__ = ["DefaultCallbacks"]
