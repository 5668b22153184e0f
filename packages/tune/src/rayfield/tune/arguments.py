"""Checks of ``tune.run``'s arguments, each naming the argument and what it takes
(``check_max_failures``, which ``Experiment`` runs, is defined in
:mod:`rayfield.tune.experiment`)."""

from __future__ import annotations

import datetime
import math
from typing import Any

from rayfield.tune.experiment import check_max_failures
from rayfield.tune.schedulers.trial_scheduler import TrialScheduler
from rayfield.tune.search.search_algorithm import SearchAlgorithm
from rayfield.tune.search.searcher import Searcher

__all__ = ["check_max_failures", "check_scheduler", "check_search_alg", "check_time_budget"]


def check_time_budget(time_budget_s: Any) -> float | None:
    """``time_budget_s`` in seconds: None, a number > 0 (``inf``: no budget) or a
    positive ``datetime.timedelta``.

    Raises:
        TypeError: not a number nor a timedelta.
        ValueError: zero, negative or NaN.
    """
    if time_budget_s is None:
        return None
    if isinstance(time_budget_s, datetime.timedelta):
        seconds = time_budget_s.total_seconds()
    elif isinstance(time_budget_s, (int, float)) and not isinstance(time_budget_s, bool):
        seconds = float(time_budget_s)
    else:
        raise TypeError(
            f"time_budget_s must be seconds (a number > 0) or a datetime.timedelta, got "
            f"{type(time_budget_s).__name__}"
        )
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError(f"time_budget_s must be > 0 seconds, got {time_budget_s!r}")
    return seconds


def check_scheduler(scheduler: Any) -> None:
    """``scheduler``: None or a TrialScheduler instance (as Ray Tune's ``tune.run``).

    Raises:
        TypeError: anything else; a name such as ``"asha"`` is not resolved.
    """
    if scheduler is not None and not isinstance(scheduler, TrialScheduler):
        hint = ""
        if isinstance(scheduler, (str, type)):
            hint = " (pass an instance, e.g. scheduler=ASHAScheduler(), not a name or a class)"
        raise TypeError(
            "scheduler must be a TrialScheduler instance from rayfield.tune.schedulers "
            "(FIFOScheduler, ASHAScheduler / AsyncHyperBandScheduler, HyperBandScheduler, "
            "HyperBandForBOHB, MedianStoppingRule, PopulationBasedTraining, PB2) or None, "
            f"got {scheduler!r}{hint}"
        )


def check_search_alg(search_alg: Any) -> None:
    """``search_alg``: None, a Searcher or a SearchAlgorithm instance.

    Raises:
        TypeError: anything else; searcher names (Ray Tune's ``"hyperopt"``...) are not
            resolved.
    """
    if search_alg is not None and not isinstance(search_alg, (Searcher, SearchAlgorithm)):
        hint = ""
        if isinstance(search_alg, (str, type)):
            hint = " (pass an instance, e.g. search_alg=OptunaSearch(), not a name or a class)"
        raise TypeError(
            "search_alg must be a Searcher (rayfield.tune.search: GPSearch, BayesOptSearch, "
            "TuneBOHB, OptunaSearch, HyperOptSearch, ...; ConcurrencyLimiter, Repeater), a "
            f"SearchAlgorithm (BasicVariantGenerator, SearchGenerator) or None, got "
            f"{search_alg!r}{hint}"
        )
