"""Trial schedulers: FIFO, median stopping, ASHA, HyperBand, PBT, PB2 and HyperBand for BOHB.

``PB2`` (which needs numpy) is imported on first use, so that trial actors, which import
``rayfield.tune``, start without loading numpy.
"""

from __future__ import annotations

from rayfield.tune.lazy import lazy_getattr
from rayfield.tune.schedulers.async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from rayfield.tune.schedulers.hb_bohb import HyperBandForBOHB
from rayfield.tune.schedulers.hyperband import HyperBandScheduler
from rayfield.tune.schedulers.median_stopping import MedianStoppingRule
from rayfield.tune.schedulers.pbt import PopulationBasedTraining
from rayfield.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler

__getattr__ = lazy_getattr(__name__, {"PB2": "rayfield.tune.schedulers.pb2:PB2"})


__all__ = [
    "PB2",
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "TrialScheduler",
]
