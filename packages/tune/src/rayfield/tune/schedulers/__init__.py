"""Trial schedulers: FIFO, median stopping, ASHA, HyperBand, PBT, PB2 and HyperBand for BOHB.

Each scheduler's module is imported on first use: a trainable's module that imports one
scheduler (``from rayfield.tune.schedulers import ASHAScheduler``), and is imported again
by every trial's actor, loads that one only (and never numpy, which ``PB2`` needs).
"""

from __future__ import annotations

from rayfield.tune.lazy import lazy_getattr

__getattr__ = lazy_getattr(
    __name__,
    {
        "ASHAScheduler": "rayfield.tune.schedulers.async_hyperband:ASHAScheduler",
        "AsyncHyperBandScheduler": "rayfield.tune.schedulers.async_hyperband:"
        "AsyncHyperBandScheduler",
        "FIFOScheduler": "rayfield.tune.schedulers.trial_scheduler:FIFOScheduler",
        "HyperBandForBOHB": "rayfield.tune.schedulers.hb_bohb:HyperBandForBOHB",
        "HyperBandScheduler": "rayfield.tune.schedulers.hyperband:HyperBandScheduler",
        "MedianStoppingRule": "rayfield.tune.schedulers.median_stopping:MedianStoppingRule",
        "PB2": "rayfield.tune.schedulers.pb2:PB2",
        "PopulationBasedTraining": "rayfield.tune.schedulers.pbt:PopulationBasedTraining",
        "TrialScheduler": "rayfield.tune.schedulers.trial_scheduler:TrialScheduler",
    },
)


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
