"""``TrialRunner``: the experiment's state machine, with no processes in it.

Events go in (:meth:`TrialRunner.on_trial_result`, :meth:`~TrialRunner.on_trial_error`,
:meth:`~TrialRunner.set_cluster_resources`); actions come out of
:meth:`TrialRunner.step` as the frozen classes of :mod:`rayfield.tune.actions` (start,
train, pause, release, save, persist, delete, reset, export) for an executor to carry out
in order. The runner asks the search algorithm for trials, lets the scheduler choose which
to run and decide on each result (the scheduler returns the decisions of
:mod:`rayfield.tune.decisions`; the runner acts on them), keeps resource accounting,
applies stopping rules, checkpoint policy and failure recovery, and tells callbacks
(loggers) what happened.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import Any

from rayfield.tune import actions as A
from rayfield.tune import decisions as D
from rayfield.tune import result as R
from rayfield.tune.callback import Callback
from rayfield.tune.error import TuneError
from rayfield.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from rayfield.tune.search.search_algorithm import SearchAlgorithm
from rayfield.tune.session import CHECKPOINT_KEY
from rayfield.tune.stopper import Stopper
from rayfield.tune.trial import Trial, TrialCheckpoint

__all__ = ["TrialRunner"]


class TrialRunner:
    """The experiment loop as a pure object.

    Args:
        search_alg: where trials come from.
        scheduler: decides per result (default FIFO).
        stopper: a global stopping rule (in addition to each trial's ``stop`` dict).
        callbacks: told about every trial event (loggers, progress reporters).
        cluster_resources: ``{"CPU": 2, ...}``, the total the trials may hold.
        experiment_dir: where schedulers may write logs (PBT's policy files).
        max_pending: most trials generated ahead of free resources.
        queue_trials: when nothing runs, start a trial even if the cluster cannot hold it
            now (its actor waits in the cluster's queue, e.g. for an autoscaler's node).
    """

    def __init__(
        self,
        search_alg: SearchAlgorithm,
        scheduler: TrialScheduler | None = None,
        stopper: Stopper | None = None,
        callbacks: Sequence[Callback] = (),
        cluster_resources: dict[str, float] | None = None,
        experiment_dir: str = "",
        max_pending: int = 1,
        queue_trials: bool = False,
    ) -> None:
        self.search_alg = search_alg
        self.scheduler = scheduler or FIFOScheduler()
        self.stopper = stopper
        self.callbacks = list(callbacks)
        self.experiment_dir = experiment_dir
        self.max_pending = max_pending
        self.queue_trials = queue_trials
        self._trials: list[Trial] = []
        # The trials not finished yet: what every step scans (the others are history).
        self._unfinished: list[Trial] = []
        self._by_id: dict[str, Trial] = {}
        self._total = dict(cluster_resources or {"CPU": 1.0})
        self._committed: dict[str, float] = {}
        self._holding: set[str] = set()
        self._outbox: list[A.Action] = []
        self._stop_all = False
        self._stop_requests: list[str] = []
        # Finished trials not yet appended to the finished-trials file, and its length.
        self._unpersisted: list[Trial] = []
        self._persisted_bytes = 0

    # -- queries (also used by schedulers) ---------------------------------------------
    def get_trials(self) -> list[Trial]:
        return list(self._trials)

    def get_trial(self, trial_id: str) -> Trial | None:
        return self._by_id.get(trial_id)

    def trials_with_status(self, status: str) -> list[Trial]:
        if status in (Trial.TERMINATED, Trial.ERROR):
            return [t for t in self._trials if t.status == status]
        return [t for t in self.unfinished_trials() if t.status == status]

    def unfinished_trials(self) -> list[Trial]:
        """The trials that are not TERMINATED or ERROR, in the order they came."""
        still = []
        for trial in self._unfinished:
            if trial.is_finished():
                self._unpersisted.append(trial)
                trial.compact()
            else:
                still.append(trial)
        self._unfinished = still
        return list(still)

    def num_finished(self) -> int:
        return len(self._trials) - len(self.unfinished_trials())

    def has_resources_for(self, trial: Trial) -> bool:
        if self.queue_trials and not self._holding:
            return True
        for name, amount in trial.resources.total().items():
            if self._committed.get(name, 0.0) + amount > self._total.get(name, 0.0) + 1e-9:
                return False
        return True

    def fits_cluster(self, trial: Trial) -> bool:
        return all(
            amount <= self._total.get(name, 0.0) + 1e-9
            for name, amount in trial.resources.total().items()
        )

    def search_finished(self) -> bool:
        """True once the search algorithm will make no more trials."""
        return self.search_alg.is_finished()

    def is_finished(self) -> bool:
        if self._stop_all:
            return not self.unfinished_trials()
        return self.search_alg.is_finished() and not self.unfinished_trials()

    # -- events ------------------------------------------------------------------------
    def set_cluster_resources(self, resources: dict[str, float]) -> None:
        self._total = dict(resources)

    def add_trial(self, trial: Trial, persisted: bool = False) -> None:
        """Queue ``trial`` (as PENDING, or as it is when restored from a saved state).

        Args:
            persisted: a finished trial restored from the finished-trials file (it is
                not appended to it again).
        """
        self._trials.append(trial)
        if not trial.is_finished():
            self._unfinished.append(trial)
        elif not persisted:
            self._unpersisted.append(trial)
        self._by_id[trial.trial_id] = trial
        if not trial.is_finished():
            self.scheduler.on_trial_add(self, trial)
        for cb in self.callbacks:
            cb.on_trial_add(trial)

    def request_stop_trial(self, trial_id: str) -> None:
        """Stop a trial at the next step (from a server or a user)."""
        self._stop_requests.append(trial_id)

    def request_stop_experiment(self) -> None:
        """Stop every trial at the next step."""
        self._stop_all = True

    def step(self) -> list[A.Action]:
        """Queue new trials, start those that fit; returns every pending action.

        Raises:
            TuneError: a pending trial needs more than the whole cluster has.
        """
        for trial_id in self._stop_requests:
            trial = self._by_id.get(trial_id)
            if trial is not None and not trial.is_finished():
                self.stop_trial(trial)
        self._stop_requests.clear()
        if self.stopper is not None and self.stopper.stop_all():
            self._stop_all = True
        if self._stop_all:
            for trial in self.unfinished_trials():
                if not trial.is_finished():
                    self.stop_trial(trial)
            return self._drain()
        while True:
            self._fill_queue()
            self._decide(None, self.scheduler.on_step(self))
            trial = self.scheduler.choose_trial_to_run(self)
            if trial is None:
                break
            self._start(trial)
        pending = self.trials_with_status(Trial.PENDING)
        if pending and not self._holding:
            for trial in pending:
                if not self.fits_cluster(trial):
                    raise TuneError(
                        f"Insufficient cluster resources to launch trial {trial}: it requests "
                        f"{trial.resources.total()} but the cluster has only {self._total}. "
                        "Lower resources_per_trial or add nodes."
                    )
        return self._drain()

    def _fill_queue(self) -> None:
        waiting = len(self.trials_with_status(Trial.PENDING))
        while waiting < self.max_pending and not self.search_alg.is_finished():
            trial = self.search_alg.next_trial()
            if trial is None:
                return
            self.add_trial(trial)
            waiting += 1

    def _drain(self) -> list[A.Action]:
        out, self._outbox = self._outbox, []
        return out

    def _start(self, trial: Trial) -> None:
        checkpoint = trial.checkpoint
        self._hold(trial)
        trial.status = Trial.RUNNING
        self._outbox.append(A.StartTrial(trial, checkpoint, self._batch(trial, trial.last_result)))
        for cb in self.callbacks:
            cb.on_trial_start(trial)

    def _hold(self, trial: Trial) -> None:
        if trial.trial_id in self._holding:
            return
        self._holding.add(trial.trial_id)
        for name, amount in trial.resources.total().items():
            self._committed[name] = self._committed.get(name, 0.0) + amount

    def _release(self, trial: Trial) -> None:
        if trial.trial_id not in self._holding:
            return
        self._holding.discard(trial.trial_id)
        for name, amount in trial.resources.total().items():
            self._committed[name] = self._committed.get(name, 0.0) - amount

    def on_trial_result(self, trial: Trial, result: dict[str, Any], fetch_s: float = 0.0) -> None:
        """Process one result of a running trial (results of other trials are dropped).

        Args:
            fetch_s: this result's share of the seconds spent fetching it; with the time
                spent here deciding on it, it becomes the result's ``tune_overhead_s``.
        """
        started = time.perf_counter()
        if trial.status != Trial.RUNNING:
            return
        result = dict(result)
        blob = result.pop(CHECKPOINT_KEY, None)
        duplicate = result.pop("__duplicate__", False)
        if duplicate:  # the function ended without a new report: its last one is final
            result = {**trial.last_result, R.DONE: True}
        result[R.TRIAL_ID] = trial.trial_id
        done = bool(result.get(R.DONE)) or self._should_stop(trial, result)
        others: list[D.SchedulerDecision] = []
        if done:
            result[R.DONE] = True
            decision: D.SchedulerDecision = D.STOP
            others = D.as_list(self.scheduler.on_trial_complete(self, trial, result))
            self.search_alg.on_trial_complete(trial.trial_id, result=result)
        else:
            decision, others = _split(self.scheduler.on_trial_result(self, trial, result))
            self.search_alg.on_trial_result(trial.trial_id, result)
            if isinstance(decision, D.Stop):
                result[R.DONE] = True
                self.search_alg.on_trial_complete(
                    trial.trial_id, result=result, early_terminated=True
                )
        if not duplicate:
            result[R.TUNE_OVERHEAD_S] = fetch_s + time.perf_counter() - started
            trial.update_last_result(result)
            for cb in self.callbacks:
                cb.on_trial_result(trial, result)
        else:
            trial.last_result = result
        if blob is not None:
            self._persist(trial, blob, result)
        elif trial.should_checkpoint(result) and not duplicate:
            self._save_to_disk(trial, result)
        self._decide(trial, others)
        if trial.status != Trial.RUNNING:  # the scheduler stopped or paused it already
            return
        if isinstance(decision, D.Stop):
            if trial.export_formats:
                self._outbox.append(A.ExportModel(trial))
            self._finish(trial, Trial.TERMINATED)
        elif isinstance(decision, D.Pause):
            self.pause_trial(trial)
        else:
            # Of a batch of this trial's results, the last one's decision counts.
            self._outbox = [
                d for d in self._outbox if not (isinstance(d, A.TrainTrial) and d.trial is trial)
            ]
            self._outbox.append(A.TrainTrial(trial, self._batch(trial, result)))

    def _decide(self, reporting: Trial | None, decisions: Any) -> None:
        """Act on a scheduler's decisions about given trials, in order (a Continue,
        Pause or Stop, which concern ``reporting``, is handled by the caller)."""
        for decision in D.as_list(decisions):
            if isinstance(decision, D.StopTrial):
                self.stop_trial(decision.trial)
            elif isinstance(decision, D.Unpause):
                self.unpause_trial(decision.trial)
            elif isinstance(decision, D.SaveToMemory):
                if decision.trial.status == Trial.RUNNING:
                    self._outbox.append(A.SaveTrial(decision.trial, decision.checkpoint))
            elif isinstance(decision, D.Reset):
                self.reset_trial(decision.trial, decision.config, decision.tag, decision.checkpoint)
            elif reporting is None:
                raise TuneError(
                    f"{type(self.scheduler).__name__} returned {decision!r} outside "
                    "on_trial_result: only StopTrial, Unpause, SaveToMemory and Reset name "
                    "their trial"
                )

    def _batch(self, trial: Trial, result: dict[str, Any]) -> int:
        """How many results ``trial`` may return in its next call (1 with checkpoint_freq:
        checkpoints are taken between single results)."""
        if trial.checkpoint_freq:
            return 1
        return max(1, int(self.scheduler.results_to_buffer(trial, result or {})))

    def _should_stop(self, trial: Trial, result: dict[str, Any]) -> bool:
        if trial.stopping_criterion:
            from rayfield.tune.stopper import DictStopper

            if DictStopper(trial.stopping_criterion)(trial.trial_id, result):
                return True
        return self.stopper is not None and self.stopper(trial.trial_id, result)

    def on_trial_error(self, trial: Trial, error: str) -> None:
        """The trial's actor or its training raised ``error`` (a traceback)."""
        if trial.is_finished():
            return
        trial.num_failures += 1
        trial.error_msg = error
        self._release(trial)
        self._outbox.append(A.ReleaseTrial(trial, error=True))
        for cb in self.callbacks:
            cb.on_trial_error(trial, error)
        others = self.scheduler.on_trial_error(self, trial)
        if trial.should_recover():
            trial.status = Trial.PENDING
            self.scheduler.on_trial_add(self, trial)
        else:
            trial.status = Trial.ERROR
            self.search_alg.on_trial_complete(trial.trial_id, error=True)
            for cb in self.callbacks:
                cb.on_trial_complete(trial)
        self._decide(None, others)

    # -- actions (what the scheduler's decisions and the user's requests do) --------------
    def stop_trial(self, trial: Trial) -> None:
        """Stop ``trial`` now, whatever its state."""
        if trial.is_finished():
            return
        if trial.status in (Trial.PENDING, Trial.PAUSED):
            others = self.scheduler.on_trial_remove(self, trial)
            self.search_alg.on_trial_complete(trial.trial_id, early_terminated=True)
        else:
            others = self.scheduler.on_trial_complete(self, trial, trial.last_result)
            self.search_alg.on_trial_complete(trial.trial_id, result=trial.last_result)
        self._finish(trial, Trial.TERMINATED)
        self._decide(None, others)

    def _finish(self, trial: Trial, status: str) -> None:
        was_running = trial.status == Trial.RUNNING
        trial.status = status
        self._release(trial)
        if was_running:
            self._outbox.append(A.ReleaseTrial(trial))
        for cb in self.callbacks:
            cb.on_trial_complete(trial)

    def pause_trial(self, trial: Trial) -> None:
        """Checkpoint ``trial`` in memory and free its resources (RUNNING -> PAUSED)."""
        checkpoint = TrialCheckpoint("memory", result=dict(trial.last_result))
        trial.checkpoint = checkpoint
        trial.status = Trial.PAUSED
        self._release(trial)
        self._outbox.append(A.PauseTrial(trial, checkpoint))

    def unpause_trial(self, trial: Trial) -> None:
        """PAUSED -> PENDING: the trial runs again when resources allow."""
        if trial.status == Trial.PAUSED:
            trial.status = Trial.PENDING

    def reset_trial(
        self, trial: Trial, new_config: dict[str, Any], new_tag: str, checkpoint: TrialCheckpoint
    ) -> None:
        """Give a running trial ``new_config`` and the state in ``checkpoint`` (PBT)."""
        trial.config = new_config
        trial.experiment_tag = new_tag
        trial.checkpoint = checkpoint
        self._outbox.append(A.ResetTrial(trial, checkpoint))
        for cb in self.callbacks:
            cb.on_trial_reset(trial)

    def _save_to_disk(self, trial: Trial, result: dict[str, Any]) -> None:
        checkpoint = self._disk_checkpoint(trial, result)
        if checkpoint is not None:
            self._outbox.append(A.SaveTrial(trial, checkpoint))

    def _persist(self, trial: Trial, blob: Any, result: dict[str, Any]) -> None:
        checkpoint = self._disk_checkpoint(trial, result)
        if checkpoint is not None:
            self._outbox.append(A.PersistCheckpoint(trial, checkpoint, blob))

    def _disk_checkpoint(self, trial: Trial, result: dict[str, Any]) -> TrialCheckpoint | None:
        """A new disk checkpoint for ``result``, or None if ``keep_checkpoints_num``
        keeps better ones; schedules deletion of the one it replaces."""
        it = int(result.get(R.TRAINING_ITERATION, 0))
        path = os.path.join(trial.logdir or ".", f"checkpoint_{it:06d}")
        checkpoint = TrialCheckpoint("disk", path, dict(result))
        keep = trial.keep_checkpoints_num
        if keep is not None:
            score = trial.checkpoint_score(result)
            kept = trial.disk_checkpoints
            if score is None:
                return None
            if len(kept) >= keep:
                worst = min(kept, key=lambda c: trial.checkpoint_score(c.result) or -math.inf)
                if (trial.checkpoint_score(worst.result) or -math.inf) >= score:
                    return None
                kept.remove(worst)
                self._outbox.append(A.DeleteCheckpoint(trial, worst))
        trial.disk_checkpoints.append(checkpoint)
        trial.checkpoint = checkpoint
        return checkpoint

    # -- persistence ------------------------------------------------------------------------
    def set_persisted_bytes(self, size: int) -> None:
        """The finished-trials file already holds ``size`` bytes (after a resume)."""
        self._persisted_bytes = size

    def encode_checkpoint(self) -> tuple[bytes, int, str]:
        """What one save writes: ``(lines, offset, text)``.

        ``lines`` are the trials finished since the last call, one JSON object per line,
        to append to :data:`~rayfield.tune.state.FINISHED_FILE` at byte ``offset`` (see
        :func:`~rayfield.tune.state.append_finished`); ``text`` is the experiment state
        (the unfinished trials, the search algorithm, the finished file's length
        including ``lines``). Each finished trial is encoded once, here.
        """
        from rayfield.tune.state import FINISHED_FILE, encode_state, trial_to_json

        unfinished = self.unfinished_trials()
        lines = "".join(encode_state(trial_to_json(t)) + "\n" for t in self._unpersisted)
        self._unpersisted = []
        data = lines.encode()
        offset = self._persisted_bytes
        self._persisted_bytes += len(data)
        parts = [encode_state(trial_to_json(t)) for t in unfinished]
        rest = encode_state(
            {
                "search_alg": self.search_alg.get_state(),
                "finished": {"file": FINISHED_FILE, "bytes": self._persisted_bytes},
                "timestamp": time.time(),
            }
        )
        return data, offset, '{"trials": [' + ", ".join(parts) + "], " + rest[1:]

    def get_state(self) -> dict[str, Any]:
        """The experiment's state for a resume (JSON-able; see :mod:`rayfield.tune.state`)."""
        from rayfield.tune.state import trial_to_json

        return {
            "trials": [trial_to_json(t) for t in self._trials],
            "search_alg": self.search_alg.get_state(),
            "timestamp": time.time(),
        }


def _split(out: Any) -> tuple[D.SchedulerDecision, list[D.SchedulerDecision]]:
    """``on_trial_result``'s answer as (the decision on the reporting trial, the
    decisions on given trials); Continue when it names none (the last one counts)."""
    mine: D.SchedulerDecision = D.CONTINUE
    others: list[D.SchedulerDecision] = []
    for decision in D.as_list(out):
        if isinstance(decision, (D.Continue, D.Pause, D.Stop)):
            mine = decision
        else:
            others.append(decision)
    return mine, others
