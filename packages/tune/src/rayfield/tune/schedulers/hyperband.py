"""Synchronous HyperBand: brackets of successive halving, trials paused between rungs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rayfield.tune import decisions as D
from rayfield.tune.error import TuneError
from rayfield.tune.schedulers.trial_scheduler import Decisions, FIFOScheduler

if TYPE_CHECKING:
    from rayfield.tune.schedulers.trial_scheduler import SchedulerRunner
    from rayfield.tune.trial import Trial

__all__ = ["HyperBandScheduler"]


class _Bracket:
    """One successive-halving run: up to ``n`` trials, first milestone ``r``, ``s`` halvings."""

    def __init__(self, s: int, n: int, r: int, max_t: int, eta: int, time_attr: str) -> None:
        self.s, self.n0, self.r0 = s, n, r
        self.n, self.r, self.cumul_r = n, r, r
        self.halvings_left = s
        self.max_t, self.eta, self.time_attr = max_t, eta, time_attr
        self.live: dict[str, tuple[Trial, dict[str, Any] | None]] = {}
        self.all_trials: list[Trial] = []
        self.progress = 0.0
        self.total_work = self._total_work()

    def _total_work(self) -> float:
        n, r, cumul, work = self.n0, self.r0, self.r0, 0.0
        for _ in range(self.s + 1):
            work += n * r
            n = math.ceil(n / self.eta)
            r = int(min(r * self.eta, self.max_t - cumul))
            cumul += r
        return work

    def filled(self) -> bool:
        return len(self.all_trials) >= self.n0

    def add(self, trial: Trial) -> None:
        self.live[trial.trial_id] = (trial, None)
        self.all_trials.append(trial)

    def time_of(self, result: dict[str, Any] | None) -> float:
        return float(result.get(self.time_attr, 0)) if result else 0.0

    def update(self, trial: Trial, result: dict[str, Any]) -> None:
        _, old = self.live[trial.trial_id]
        self.progress += max(self.time_of(result) - self.time_of(old), 0.0)
        self.live[trial.trial_id] = (trial, result)

    def iteration_done(self, no_more_trials: bool) -> bool:
        """Every live trial reached the milestone, and no trial will join the bracket."""
        if not (self.filled() or no_more_trials):
            return False
        return all(self.time_of(r) >= self.cumul_r for _, r in self.live.values())

    def finished(self) -> bool:
        return self.halvings_left == 0

    def halve(self, score: Any) -> tuple[list[Trial], list[Trial]]:
        """Advance the milestone; returns (kept, dropped) live trials by score."""
        self.n = math.ceil(self.n / self.eta)
        self.r = int(min(self.r * self.eta, self.max_t - self.cumul_r))
        self.cumul_r += self.r
        self.halvings_left -= 1
        ranked = sorted(
            self.live.values(), key=lambda tr: score(tr[1] or {}) or -math.inf, reverse=True
        )
        return [t for t, _ in ranked[: self.n]], [t for t, _ in ranked[self.n :]]

    def completion(self) -> float:
        return self.progress / self.total_work if self.total_work else 1.0

    def debug_str(self) -> str:
        counts: dict[str, int] = {}
        for trial in self.all_trials:
            counts[trial.status] = counts.get(trial.status, 0) + 1
        return (
            f"Bracket(Max Size (n)={self.n}, Milestone (r)={self.cumul_r}, "
            f"completed={100 * self.completion():.1f}%): {counts}"
        )


class HyperBandScheduler(FIFOScheduler):
    """HyperBand over successive-halving brackets, with ``eta = 3``.

    Bracket ``s`` (0..s_max) holds up to ``ceil(s_max+1 / (s+1) * eta**s)`` trials with a
    first milestone ``int(max_t * eta**-s)``. A trial reaching its bracket's milestone is
    paused until every live trial of the bracket reaches it; then the top ``1/eta`` continue
    to the next (cumulative) milestone and the others stop. A full band of brackets is
    filled smallest ``s`` first. Trials are paused and resumed, so a trainable must save and
    restore checkpoints.

    Args:
        time_attr: the result key measuring progress.
        metric, mode: what to optimise.
        max_t: the most ``time_attr`` a trial gets; the last milestone.

    Raises:
        TuneError: ``max_t`` < 1.

    Sources:
        Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
        Optimization", JMLR 18(185), 2018, Algorithm 1.
    """

    ETA = 3

    def __init__(
        self,
        time_attr: str = "training_iteration",
        reward_attr: str | None = None,
        metric: str | None = None,
        mode: str | None = None,
        max_t: int = 81,
    ) -> None:
        super().__init__(metric, mode, reward_attr)
        if max_t < 1:
            raise TuneError(f"max_t must be >= 1, got {max_t}")
        self.time_attr = time_attr
        self.max_t = max_t
        self.s_max_1 = round(math.log(max_t) / math.log(self.ETA)) + 1
        self.bands: list[list[_Bracket]] = [[]]
        self._bracket_of: dict[str, _Bracket] = {}
        self.num_stopped = 0

    def _new_bracket(self, s: int) -> _Bracket:
        n = math.ceil(self.s_max_1 / (s + 1) * self.ETA**s)
        r = int(self.max_t * self.ETA ** (-s))
        return _Bracket(s, n, max(r, 1), self.max_t, self.ETA, self.time_attr)

    def _bracket_s(self, position: int) -> int:
        """The ``s`` of the ``position``-th bracket of a band (fewest halvings first)."""
        return position

    def bracket_sizes(self) -> list[tuple[int, int]]:
        """(n, r) of the brackets of one band, in the order they fill."""
        return [
            (b.n0, b.r0)
            for b in (self._new_bracket(self._bracket_s(i)) for i in range(self.s_max_1))
        ]

    def on_trial_add(self, runner: SchedulerRunner, trial: Trial) -> None:
        band = self.bands[-1]
        if not band or band[-1].filled():
            if len(band) >= self.s_max_1:
                band = []
                self.bands.append(band)
            band.append(self._new_bracket(self._bracket_s(len(band))))
        band[-1].add(trial)
        self._bracket_of[trial.trial_id] = band[-1]

    def on_trial_result(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        bracket = self._bracket_of.get(trial.trial_id)
        if bracket is None:
            return self.CONTINUE
        bracket.update(trial, result)
        if bracket.time_of(result) < bracket.cumul_r:
            return self.CONTINUE
        if not bracket.iteration_done(runner.search_finished()):
            return self.PAUSE
        return self._process(bracket, trial)

    def _process(self, bracket: _Bracket, reporting: Trial | None) -> list[D.SchedulerDecision]:
        """Halve (or end) ``bracket``: the decision for ``reporting`` (Stop, else
        Continue) and a StopTrial or Unpause for each other trial that changes."""
        from rayfield.tune.trial import Trial

        decisions: list[D.SchedulerDecision] = []
        if bracket.finished():
            for trial, _ in list(bracket.live.values()):
                if trial is reporting:
                    decisions.append(self.STOP)
                elif trial.status == Trial.PAUSED:
                    decisions.append(D.StopTrial(trial))
            return decisions
        kept, dropped = bracket.halve(self.score)
        for trial in dropped:
            self.num_stopped += 1
            bracket.live.pop(trial.trial_id, None)
            if trial is reporting:
                decisions.append(self.STOP)
            elif trial.status in (Trial.PAUSED, Trial.PENDING):
                decisions.append(D.StopTrial(trial))
        for trial in kept:
            if trial is not reporting and trial.status == Trial.PAUSED:
                decisions.append(D.Unpause(trial))
        return decisions

    def _forget(self, runner: SchedulerRunner, trial: Trial) -> list[D.SchedulerDecision]:
        bracket = self._bracket_of.pop(trial.trial_id, None)
        if bracket is None or trial.trial_id not in bracket.live:
            return []
        del bracket.live[trial.trial_id]
        if bracket.live and bracket.iteration_done(runner.search_finished()):
            return self._process(bracket, None)
        return []

    def on_trial_complete(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        return self._forget(runner, trial)

    def on_trial_error(self, runner: SchedulerRunner, trial: Trial) -> Decisions:
        return self._forget(runner, trial)

    def on_trial_remove(self, runner: SchedulerRunner, trial: Trial) -> Decisions:
        return self._forget(runner, trial)

    def on_step(self, runner: SchedulerRunner) -> Decisions:
        """Once the search is finished, unfilled brackets get no more trials: those whose
        trials all wait are halved."""
        from rayfield.tune.trial import Trial

        decisions: list[D.SchedulerDecision] = []
        if runner.search_finished():
            for band in self.bands:
                for bracket in band:
                    waiting = [t for t, _ in bracket.live.values() if t.status == Trial.PAUSED]
                    if waiting and bracket.iteration_done(True):
                        decisions += self._process(bracket, None)
        return decisions

    def choose_trial_to_run(self, runner: SchedulerRunner) -> Trial | None:
        from rayfield.tune.trial import Trial

        for band in self.bands:
            for bracket in sorted(band, key=lambda b: b.completion()):
                for trial, _ in bracket.live.values():
                    if trial.status == Trial.PENDING and runner.has_resources_for(trial):
                        return trial
        return None

    def debug_string(self) -> str:
        lines = [
            f"Using HyperBand: num_stopped={self.num_stopped} "
            f"total_brackets={sum(len(b) for b in self.bands)}"
        ]
        for i, band in enumerate(self.bands):
            lines.append(f"Round #{i}:")
            lines += [f"  {b.debug_str()}" for b in band]
        return "\n".join(lines)
