"""Experimental APIs of the reference: ``signal`` and ``async_api``."""

from __future__ import annotations

from rayfield.experimental import async_api, signal

__all__ = ["async_api", "signal"]
