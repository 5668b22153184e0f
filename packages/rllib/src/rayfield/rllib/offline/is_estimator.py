"""RLlib's import path of `ImportanceSamplingEstimator`."""

from __future__ import annotations

from rayfield.rllib.offline.estimators import ImportanceSamplingEstimator

__all__ = ["ImportanceSamplingEstimator"]
