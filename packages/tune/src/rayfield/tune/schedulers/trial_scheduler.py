"""``TrialScheduler``: decides, per result, whether a trial continues, pauses or stops.

Call order: ``on_trial_add`` when a trial is queued; ``on_step`` at each step of the
runner, then ``choose_trial_to_run`` whenever resources are free; ``on_trial_result`` per
result of a running trial; then one of ``on_trial_complete`` (it ended),
``on_trial_error`` (it failed) or ``on_trial_remove`` (stopped while paused or pending).

Schedulers decide and the runner acts: ``on_trial_result`` returns a decision of
:mod:`rayfield.tune.decisions` (``Continue``/``Pause``/``Stop`` for the reporting trial)
or a list of them (with ``StopTrial``, ``Unpause``, ``SaveToMemory``, ``Reset`` for any
trial); the other hooks may return a list. A scheduler reads the runner
(:class:`SchedulerRunner`) but never calls it to act.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Protocol

from rayfield.tune import decisions as D
from rayfield.tune.error import TuneError

if TYPE_CHECKING:
    from rayfield.tune.trial import Trial

# What a hook returns: one decision, a list of them, or None (nothing to do).
Decisions = Any

__all__ = ["Decisions", "FIFOScheduler", "SchedulerRunner", "TrialScheduler"]


class SchedulerRunner(Protocol):
    """What a scheduler's hooks may read of the runner they are given
    (:class:`~rayfield.tune.runner.TrialRunner` is one; the runner imports the schedulers,
    so they name it by this interface). Queries only: a scheduler acts by returning
    decisions."""

    @property
    def experiment_dir(self) -> str:
        """Where schedulers may write logs (PBT's policy files)."""
        ...

    def trials_with_status(self, status: str) -> list[Trial]: ...

    def has_resources_for(self, trial: Trial) -> bool: ...

    def search_finished(self) -> bool: ...


class TrialScheduler:
    """Base class of trial schedulers.

    Args:
        metric: the result key to optimise (default ``episode_reward_mean``, or what
            ``tune.run(metric=...)`` sets).
        mode: ``"max"`` or ``"min"``.
        reward_attr: deprecated; the same as ``metric`` with ``mode="max"``.

    Raises:
        TuneError: ``mode`` is neither ``"min"`` nor ``"max"``.
    """

    CONTINUE: D.Continue = D.CONTINUE
    PAUSE: D.Pause = D.PAUSE
    STOP: D.Stop = D.STOP

    def __init__(
        self, metric: str | None = None, mode: str | None = None, reward_attr: str | None = None
    ) -> None:
        if reward_attr is not None:
            warnings.warn(
                "reward_attr is deprecated: use metric and mode", DeprecationWarning, stacklevel=3
            )
            metric, mode = reward_attr, "max"
        if mode not in (None, "min", "max"):
            raise TuneError(f"mode must be 'min' or 'max', got {mode!r}")
        self.metric = metric
        self.mode = mode

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        if self.metric is None:
            self.metric = metric
        if self.mode is None:
            self.mode = mode
        return True

    def _resolved(self) -> tuple[str, str]:
        return self.metric or "episode_reward_mean", self.mode or "max"

    def score(self, result: dict[str, Any]) -> float | None:
        """``result[metric]`` signed so that larger is better; None when missing."""
        metric, mode = self._resolved()
        value = result.get(metric)
        if value is None:
            return None
        return -float(value) if mode == "min" else float(value)

    def on_trial_add(self, runner: SchedulerRunner, trial: Trial) -> None:
        pass

    def on_trial_error(self, runner: SchedulerRunner, trial: Trial) -> Decisions:
        return None

    def on_trial_result(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        """The decision on ``result`` of the running ``trial`` (see the module)."""
        return self.CONTINUE

    def on_trial_complete(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        return None

    def on_trial_remove(self, runner: SchedulerRunner, trial: Trial) -> Decisions:
        return None

    def on_step(self, runner: SchedulerRunner) -> Decisions:
        """Called at each step of the runner, before trials are chosen to run."""
        return None

    def choose_trial_to_run(self, runner: SchedulerRunner) -> Trial | None:
        """The first PENDING trial that fits, else the first PAUSED one."""
        from rayfield.tune.trial import Trial

        for status in (Trial.PENDING, Trial.PAUSED):
            for trial in runner.trials_with_status(status):
                if runner.has_resources_for(trial):
                    return trial
        return None

    def debug_string(self) -> str:
        return f"Using {type(self).__name__}."

    def buffers_results(self) -> bool:
        """True when decisions per result do not matter (results may come in batches)."""
        return False

    def results_to_buffer(self, trial: Trial, result: dict[str, Any]) -> int:
        """How many of ``trial``'s next results (after ``result``, its latest, ``{}``
        before the first) may arrive in one batch: this scheduler would answer CONTINUE
        to all but the last of them whatever their values."""
        return 1


class FIFOScheduler(TrialScheduler):
    """Runs trials in the order they come, never stops or pauses one."""

    def debug_string(self) -> str:
        return "Using FIFO scheduling algorithm."

    def buffers_results(self) -> bool:
        return True
