"""Utilities: config merging, filters, schedules."""

from __future__ import annotations

from rayfield.rllib.utils.config import deep_update, merge_dicts
from rayfield.rllib.utils.filter import MeanStdFilter, NoFilter, RunningStat

__all__ = ["MeanStdFilter", "NoFilter", "RunningStat", "deep_update", "merge_dicts"]
