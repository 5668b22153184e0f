"""The median stopping rule of Google Vizier."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from rayfield.tune.schedulers.trial_scheduler import Decisions, FIFOScheduler

if TYPE_CHECKING:
    from rayfield.tune.schedulers.trial_scheduler import SchedulerRunner
    from rayfield.tune.trial import Trial

__all__ = ["MedianStoppingRule"]


class MedianStoppingRule(FIFOScheduler):
    """Stop a trial whose best score so far is below the median of the completed trials'
    running averages at the same time.

    At time ``t`` (``time_attr``), a trial is stopped when ``t > grace_period``, at least
    ``min_samples_required`` trials have completed, and its best score up to ``t`` is
    strictly worse than the median, over completed trials, of the mean of their scores
    reported at times ``<= t``.

    Args:
        time_attr: the result key measuring progress.
        metric, mode: what to optimise.
        grace_period: no stop before this much ``time_attr``.
        min_samples_required: completed trials needed before any stop.
        hard_stop: STOP the trial (else PAUSE it; once resumed it always continues).

    Sources:
        Golovin et al., "Google Vizier: A Service for Black-Box Optimization", KDD 2017,
        section 3.2.2 (automated early stopping, median stopping rule).
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        reward_attr: str | None = None,
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        hard_stop: bool = True,
        verbose: bool = False,
    ) -> None:
        super().__init__(metric, mode, reward_attr)
        self.time_attr = time_attr
        self.grace_period = grace_period
        self.min_samples_required = min_samples_required
        self.hard_stop = hard_stop
        self._results: dict[str, list[tuple[float, float]]] = {}
        self._completed: set[str] = set()
        self._stopped: set[str] = set()

    def on_trial_result(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        if trial.trial_id in self._stopped:
            return self.CONTINUE  # a soft-stopped trial that was resumed runs to the end
        score, t = self.score(result), result.get(self.time_attr)
        if score is None or t is None:
            return self.CONTINUE
        history = self._results.setdefault(trial.trial_id, [])
        history.append((float(t), score))
        median = self._median_at(float(t))
        best = max(s for _, s in history)
        if median is not None and best < median and t > self.grace_period:
            self._stopped.add(trial.trial_id)
            return self.STOP if self.hard_stop else self.PAUSE
        return self.CONTINUE

    def _median_at(self, t: float) -> float | None:
        if len(self._completed) < self.min_samples_required:
            return None
        averages = []
        for trial_id in self._completed:
            scores = [s for time_, s in self._results.get(trial_id, []) if time_ <= t]
            if scores:
                averages.append(sum(scores) / len(scores))
        return statistics.median(averages) if averages else None

    def on_trial_complete(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> None:
        score, t = self.score(result), result.get(self.time_attr)
        history = self._results.setdefault(trial.trial_id, [])
        if score is not None and t is not None and (not history or history[-1][0] != t):
            history.append((float(t), score))
        self._completed.add(trial.trial_id)

    def on_trial_remove(self, runner: SchedulerRunner, trial: Trial) -> None:
        if self._results.get(trial.trial_id):
            self._completed.add(trial.trial_id)

    def debug_string(self) -> str:
        return f"Using MedianStoppingRule: num_stopped={len(self._stopped)}."

    def buffers_results(self) -> bool:
        return False
