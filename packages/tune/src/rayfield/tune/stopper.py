"""Stopping rules: ``Stopper`` and the ``stop=`` forms of ``tune.run``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rayfield.tune.error import TuneError

__all__ = [
    "FunctionStopper",
    "MaximumIterationStopper",
    "Stopper",
    "TimeoutStopper",
    "TrialPlateauStopper",
    "as_stopper",
]


class Stopper:
    """Decides, per result, whether a trial (or the whole experiment) stops.

    ``__call__(trial_id, result)`` is called for every result; True stops that trial.
    ``stop_all()`` is polled by the runner; True stops every trial.
    """

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return False


class DictStopper(Stopper):
    """Stop a trial when any ``result[key] >= threshold``.

    Raises:
        TuneError: (when called) a result lacks one of the keys.
    """

    def __init__(self, criteria: dict[str, Any]) -> None:
        self.criteria = dict(criteria)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        for key, threshold in self.criteria.items():
            if key not in result:
                raise TuneError(
                    f"stopping criterion {key!r} is not in the trial's result; it reports "
                    f"{sorted(k for k in result if not k.startswith('__'))}"
                )
            if result[key] >= threshold:
                return True
        return False


class FunctionStopper(Stopper):
    """A function ``(trial_id, result) -> bool`` as a Stopper."""

    def __init__(self, function: Callable[[str, dict[str, Any]], bool]) -> None:
        self.function = function

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self.function(trial_id, result))


class MaximumIterationStopper(Stopper):
    """Stop each trial after ``max_iter`` iterations."""

    def __init__(self, max_iter: int) -> None:
        self.max_iter = max_iter

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(result.get("training_iteration", 0) >= self.max_iter)


class TimeoutStopper(Stopper):
    """Stop the whole experiment ``timeout_s`` seconds after it starts.

    Args:
        timeout_s: seconds from now.
        clock: the time source (seconds; default ``time.monotonic``), for tests.
    """

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.deadline = clock() + float(timeout_s)

    def stop_all(self) -> bool:
        return self._clock() >= self.deadline


class TrialPlateauStopper(Stopper):
    """Stop a trial whose ``metric`` std over the last ``num_results`` is below ``std``."""

    def __init__(
        self, metric: str, std: float = 0.01, num_results: int = 4, grace_period: int = 4
    ) -> None:
        self.metric, self.std, self.num_results, self.grace = metric, std, num_results, grace_period
        self._history: dict[str, list[float]] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        values = self._history.setdefault(trial_id, [])
        values.append(float(result[self.metric]))
        del values[: -self.num_results]
        if len(values) < self.num_results or result.get("training_iteration", 0) < self.grace:
            return False
        mean = sum(values) / len(values)
        return (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 < self.std


class _Combined(Stopper):
    def __init__(self, *stoppers: Stopper) -> None:
        self.stoppers = stoppers

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return any(s(trial_id, result) for s in self.stoppers)

    def stop_all(self) -> bool:
        return any(s.stop_all() for s in self.stoppers)


def as_stopper(stop: Any) -> Stopper | None:
    """The Stopper for ``stop=`` (None, a dict, a function or a Stopper).

    Raises:
        TuneError: any other type.
    """
    if stop is None or stop == {}:
        return None
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        return DictStopper(stop)
    if callable(stop):
        return FunctionStopper(stop)
    if isinstance(stop, (list, tuple)) and all(isinstance(s, Stopper) for s in stop):
        return _Combined(*stop)
    raise TuneError(
        f"stop must be a dict, a function (trial_id, result) -> bool or a Stopper, got "
        f"{type(stop).__name__}"
    )
