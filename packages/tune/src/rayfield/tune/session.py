"""The function API's side of a trial: ``tune.report``, ``tune.get_checkpoint`` and friends.

A function trainable runs on a thread of its trial's actor. Each report hands one result to
the actor's ``train()`` call and blocks until the next ``train()`` (lock-step), so one
iteration is one report. After a stop request the next report raises :class:`StopTrial`
(a ``StopIteration``), which ends the function.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from rayfield.tune.checkpoint import Checkpoint, pack_directory
from rayfield.tune.error import TuneError

__all__ = [
    "StatusReporter",
    "StopTrial",
    "get_checkpoint",
    "get_trial_dir",
    "get_trial_id",
    "get_trial_name",
    "report",
]

CHECKPOINT_KEY = "__checkpoint__"


class StopTrial(StopIteration):
    """Raised by a report after Tune decided to stop the trial."""


class _Credits:
    """A counting semaphore whose ``release(n)`` costs the same for any ``n`` (one waiter:
    the function's thread)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self.waiting = False
        """True while the function's thread waits for a credit (it can make no progress)."""

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._count += n
            self._cond.notify()

    def acquire(self) -> None:
        with self._cond:
            while self._count <= 0:
                self.waiting = True
                self._cond.wait()
            self.waiting = False
            self._count -= 1


class _Session:
    """Hand-off between the function's thread and the actor's ``train()`` calls."""

    def __init__(self, trial_info: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        self.trial_info = trial_info
        self.checkpoint = checkpoint
        # Unbounded: within a buffered call the function reports without waiting.
        self.results: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.resume = _Credits()
        self.stopping = False
        self._stop_raised = False
        self.last_report = time.time()

    def _stop(self) -> None:
        """Raise StopTrial; a function that swallowed it is parked at its next report."""
        if self._stop_raised:
            threading.Event().wait()  # never set: the daemon thread sleeps until exit
        self._stop_raised = True
        raise StopTrial

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        if self.stopping:
            self._stop()
        metrics = dict(metrics)
        now = time.time()
        metrics.setdefault("time_this_iter_s", now - self.last_report)
        if checkpoint is not None:
            metrics[CHECKPOINT_KEY] = {"files": pack_directory(checkpoint.path), "meta": {}}
        self.results.put(("result", metrics))
        self.resume.acquire()
        self.last_report = time.time()
        if self.stopping:
            self._stop()


_local = threading.local()
_current: _Session | None = None


def _set_session(session: _Session | None) -> None:
    global _current
    _current = session
    _local.session = session


def _session() -> _Session:
    session = getattr(_local, "session", None) or _current
    if session is None:
        raise TuneError(
            "this Tune function was called outside a trial: call it from a function "
            "trainable run by tune.run() or Tuner.fit()"
        )
    return session


def report(
    metrics: dict[str, Any] | None = None,
    *,
    checkpoint: Checkpoint | None = None,
    **kwargs: Any,
) -> None:
    """Report one iteration's metrics (and optionally a checkpoint) from a function trainable.

    Accepts the modern form ``report({"loss": 0.1}, checkpoint=ckpt)`` and the classic
    ``report(loss=0.1)``. ``done=True`` ends the trial.

    Raises:
        TuneError: called outside a trial.
        StopTrial: Tune stopped the trial (the function should return).
    """
    merged = {**(metrics or {}), **kwargs}
    _session().report(merged, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint this trial restarts from (after a failure, a pause or a PBT exploit)."""
    return _session().checkpoint


def get_trial_dir() -> str:
    """The trial's directory."""
    return str(_session().trial_info.get("logdir", ""))


def get_trial_id() -> str:
    return str(_session().trial_info.get("trial_id", ""))


def get_trial_name() -> str:
    return str(_session().trial_info.get("trial_name", ""))


class StatusReporter:
    """The ``reporter`` of classic function trainables: ``reporter(mean_accuracy=0.9)``."""

    def __call__(self, **metrics: Any) -> None:
        report(metrics)

    @property
    def logdir(self) -> str:
        return get_trial_dir()

    @property
    def trial_id(self) -> str:
        return get_trial_id()

    @property
    def trial_name(self) -> str:
        return get_trial_name()
