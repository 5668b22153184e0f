"""Errors raised by rayfield.tune."""

from __future__ import annotations

__all__ = ["AbortTrialExecution", "TuneError"]


class TuneError(Exception):
    """A Tune experiment, trial or search space is wrong or failed.

    ``tune.run`` raises it when trials end in ERROR (with ``raise_on_failed_trial``), when
    a stop criterion names a metric that no result carries, or when a search space cannot
    be resolved.
    """


class AbortTrialExecution(TuneError):
    """A trial cannot be (re)started; it is not retried."""
