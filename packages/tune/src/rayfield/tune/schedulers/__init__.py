"""Trial schedulers: FIFO, median stopping, ASHA, HyperBand, PBT and PB2."""

from __future__ import annotations

from rayfield.tune.schedulers.async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from rayfield.tune.schedulers.hyperband import HyperBandScheduler
from rayfield.tune.schedulers.median_stopping import MedianStoppingRule
from rayfield.tune.schedulers.pb2 import PB2
from rayfield.tune.schedulers.pbt import PopulationBasedTraining
from rayfield.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler

__all__ = [
    "PB2",
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "TrialScheduler",
]
