"""Asynchronous successive halving (ASHA)."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from rayfield.tune import decisions as D
from rayfield.tune.error import TuneError
from rayfield.tune.schedulers.trial_scheduler import Decisions, FIFOScheduler

if TYPE_CHECKING:
    from rayfield.tune.schedulers.trial_scheduler import SchedulerRunner
    from rayfield.tune.trial import Trial

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), ``q`` in [0, 1]."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class _Bracket:
    """Rungs at ``grace_period * rf**(k + s)``, highest first, each with recorded scores."""

    def __init__(self, min_t: float, max_t: float, rf: float, s: int) -> None:
        self.rf = rf
        count = int(math.log(max_t / min_t) / math.log(rf) - s + 1)
        milestones = [min_t * rf ** (k + s) for k in reversed(range(max(count, 0)))]
        self.rungs: list[tuple[float, dict[str, float]]] = [(m, {}) for m in milestones]

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        return _quantile(list(recorded.values()), 1 - 1 / self.rf)

    def on_result(self, trial_id: str, t: float, score: float) -> bool:
        """Record at the highest rung reached (once per rung); True to stop the trial."""
        for milestone, recorded in self.rungs:
            if t < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            recorded[trial_id] = score
            return cutoff is not None and score < cutoff
        return False

    def debug_str(self) -> str:
        parts = []
        for milestone, recorded in self.rungs:
            cutoff = self.cutoff(recorded)
            parts.append(f"Iter {milestone:.3f}: {cutoff if cutoff is not None else None}")
        return "Bracket: " + " | ".join(parts)


class AsyncHyperBandScheduler(FIFOScheduler):
    """Stop the trials that fall below the top ``1/reduction_factor`` at each rung.

    A trial reaching rung ``k`` (``time_attr >= grace_period * reduction_factor**(k+s)``
    in its bracket ``s``) records its score there and is stopped when that score is below
    the ``1 - 1/reduction_factor`` quantile of the scores already recorded at the rung;
    every trial stops at ``max_t``. Nothing waits for other trials (no pausing), so no
    checkpointing is needed. With several brackets, a trial joins bracket ``s`` with
    probability proportional to ``exp(rungs(s) - max rungs)``.

    Args:
        time_attr: the result key measuring progress (``training_iteration``).
        metric, mode: what to optimise.
        max_t: trials stop at this ``time_attr``.
        grace_period: the first rung (``time_attr`` before any stop).
        reduction_factor: ``eta``; a rung keeps the top ``1/eta``.
        brackets: number of brackets (1 is ASHA as in the paper's experiments).

    Raises:
        TuneError: ``grace_period`` <= 0, ``max_t`` < ``grace_period``,
            ``reduction_factor`` <= 1 or ``brackets`` < 1.

    Sources:
        Li et al., "A System for Massively Parallel Hyperparameter Tuning" (ASHA),
        MLSys 2020, arXiv:1810.05934, Algorithm 2.
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        reward_attr: str | None = None,
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 10,
        reduction_factor: float = 4,
        brackets: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric, mode, reward_attr)
        if grace_period <= 0:
            raise TuneError(f"grace_period must be > 0, got {grace_period}")
        if max_t < grace_period:
            raise TuneError(f"max_t ({max_t}) must be >= grace_period ({grace_period})")
        if reduction_factor <= 1:
            raise TuneError(f"reduction_factor must be > 1, got {reduction_factor}")
        if brackets < 1:
            raise TuneError(f"brackets must be >= 1, got {brackets}")
        self.time_attr = time_attr
        self.max_t = max_t
        self.brackets = [
            _Bracket(grace_period, max_t, reduction_factor, s) for s in range(brackets)
        ]
        self._rng = random.Random(seed)
        self._trial_bracket: dict[str, _Bracket] = {}
        self.num_stopped = 0

    def on_trial_add(self, runner: SchedulerRunner, trial: Trial) -> None:
        sizes = [len(b.rungs) for b in self.brackets]
        weights = [math.exp(n - max(sizes)) for n in sizes]
        self._trial_bracket[trial.trial_id] = self._rng.choices(self.brackets, weights)[0]

    def on_trial_result(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        t, score = result.get(self.time_attr), self.score(result)
        if t is None or score is None:
            return self.CONTINUE
        decision: D.Continue | D.Stop
        if t >= self.max_t:
            decision = self.STOP
        else:
            bracket = self._trial_bracket.get(trial.trial_id)
            if bracket is None:
                self.on_trial_add(runner, trial)
                bracket = self._trial_bracket[trial.trial_id]
            decision = self.STOP if bracket.on_result(trial.trial_id, t, score) else self.CONTINUE
        if decision == self.STOP:
            self.num_stopped += 1
        return decision

    def on_trial_complete(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> None:
        t, score = result.get(self.time_attr), self.score(result)
        bracket = self._trial_bracket.pop(trial.trial_id, None)
        if bracket is not None and t is not None and score is not None:
            bracket.on_result(trial.trial_id, t, score)

    def on_trial_remove(self, runner: SchedulerRunner, trial: Trial) -> None:
        self._trial_bracket.pop(trial.trial_id, None)

    def debug_string(self) -> str:
        lines = [f"Using AsyncHyperBand: num_stopped={self.num_stopped}"]
        lines += [b.debug_str() for b in self.brackets]
        return "\n".join(lines)

    def buffers_results(self) -> bool:
        return False

    def results_to_buffer(self, trial: Trial, result: dict[str, Any]) -> int:
        # Between two milestones every result is a CONTINUE: they may come together.
        if self.time_attr != "training_iteration":
            return 1
        bracket = self._trial_bracket.get(trial.trial_id)
        t = float(result.get(self.time_attr) or 0)
        ahead = [m for m, _ in bracket.rungs if m > t] if bracket is not None else []
        nxt = min([*ahead, float(self.max_t)])
        return max(1, math.ceil(nxt - t))


class ASHAScheduler(AsyncHyperBandScheduler):
    """:class:`AsyncHyperBandScheduler` with the modern defaults (``grace_period=1``).

    Sources:
        Li et al., "A System for Massively Parallel Hyperparameter Tuning" (ASHA),
        MLSys 2020, arXiv:1810.05934.
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            time_attr,
            None,
            metric,
            mode,
            max_t,
            grace_period,
            reduction_factor,
            brackets,
            seed,
        )
