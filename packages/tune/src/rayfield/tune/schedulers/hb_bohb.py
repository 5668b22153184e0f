"""HyperBand as BOHB runs it: brackets from the most to the least aggressive, and each
result labelled with its bracket's budget for the :class:`~rayfield.tune.search.bohb.TuneBOHB`
sampler."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rayfield.tune.schedulers.hyperband import HyperBandScheduler

if TYPE_CHECKING:
    from rayfield.tune.schedulers.trial_scheduler import Decisions, SchedulerRunner
    from rayfield.tune.trial import Trial

__all__ = ["HyperBandForBOHB"]


class HyperBandForBOHB(HyperBandScheduler):
    """Synchronous HyperBand for BOHB.

    The brackets of each band are filled from the one with the most halvings (many
    configs on the smallest budget) to the one with none, as in BOHB's Algorithm 1, so
    that the sampler has cheap observations before it proposes configs for the larger
    budgets. Every result gets ``result["hyperband_info"] = {"budget": r}``, where ``r`` is
    the milestone (in ``time_attr`` units) its trial is being trained to; ``TuneBOHB`` keeps
    one observation per trial and budget. Otherwise it behaves as
    :class:`~rayfield.tune.schedulers.HyperBandScheduler` (trials are paused between rungs,
    so trainables must save and restore checkpoints).

    Args:
        time_attr: the result key measuring progress (the budget).
        metric, mode: what to optimise.
        max_t: the largest budget, the last milestone.

    Raises:
        TuneError: ``max_t`` < 1.

    Sources:
        Falkner, Klein and Hutter, "BOHB: Robust and Efficient Hyperparameter Optimization
        at Scale", ICML 2018, Algorithm 1 (HyperBand with model-based sampling); Li et al.,
        "Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization", JMLR
        18(185), 2018.
    """

    def _bracket_s(self, position: int) -> int:
        return self.s_max_1 - 1 - position

    def _label(self, trial: Trial, result: dict[str, Any] | None) -> None:
        bracket = self._bracket_of.get(trial.trial_id)
        if bracket is not None and result is not None:
            # A stopped trial's last result keeps the budget it was reported under.
            result.setdefault("hyperband_info", {"budget": bracket.cumul_r})

    def on_trial_result(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        self._label(trial, result)
        return super().on_trial_result(runner, trial, result)

    def on_trial_complete(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        self._label(trial, result)
        return super().on_trial_complete(runner, trial, result)
