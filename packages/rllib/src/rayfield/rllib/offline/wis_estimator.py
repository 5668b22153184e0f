"""RLlib's import path of `WeightedImportanceSamplingEstimator`."""

from __future__ import annotations

from rayfield.rllib.offline.estimators import WeightedImportanceSamplingEstimator

__all__ = ["WeightedImportanceSamplingEstimator"]
