"""Function trainables: ``def f(config)`` / ``def f(config, reporter)`` run as a Trainable.

The function runs on a daemon thread of the trial's actor; each ``train()`` call lets it
run to its next report (see :mod:`rayfield.tune.session`). When it returns, the trial ends:
a returned dict is its last result, else the last report is marked final.
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any

from rayfield.tune import result as R
from rayfield.tune import session as S
from rayfield.tune.checkpoint import Checkpoint, pack_directory, unpack_directory
from rayfield.tune.error import TuneError
from rayfield.tune.trainable import Trainable

__all__ = ["FunctionTrainable", "wrap_function"]

_JOIN_TIMEOUT_S = 10.0
_RUNNER_IDLE_S = 2.0  # a runner thread without a trial for this long ends


class _Run:
    """One call of a trial's function on a :class:`_RunnerThread` (a thread's
    ``is_alive``/``join``: alive until the function returned)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()

    def is_alive(self) -> bool:
        return not self.done.is_set()

    def join(self, timeout: float | None = None) -> None:
        self.done.wait(timeout)


class _RunnerThread:
    """A daemon thread that runs an actor's trial functions one after the other.

    A reused actor hands each new trial's function to it (a queue hand-off, about 0.1 ms)
    instead of starting a thread per trial (0.5-1 ms before the function runs). The
    thread takes the trial's name while it runs its function, and ends after
    ``_RUNNER_IDLE_S`` without one (then :meth:`submit` returns None: start another).
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], _Run, str]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alive = True
        self._current: _Run | None = None
        threading.Thread(target=self._loop, daemon=True, name="trial-runner").start()

    def _loop(self) -> None:
        while True:
            try:
                fn, run, name = self._jobs.get(timeout=_RUNNER_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._alive = False
                        return
                continue
            threading.current_thread().name = name
            try:
                fn()
            finally:
                run.done.set()

    def busy(self) -> bool:
        """True while a function it was given has not returned (e.g. one that swallowed
        its stop: the next trial needs another thread)."""
        return self._current is not None and self._current.is_alive()

    def submit(self, fn: Callable[[], None], name: str) -> _Run | None:
        """Run ``fn`` next; None when the thread has ended (idle)."""
        with self._lock:
            if not self._alive:
                return None
            run = self._current = _Run()
            self._jobs.put((fn, run, name))
            return run


class FunctionTrainable(Trainable):
    """A Trainable that runs ``_function`` on a thread, one report per iteration (the
    actor's runner thread, reused by the next trial of a reused actor)."""

    _function: Callable[..., Any]
    _takes_reporter: bool = False
    _takes_config: bool = True

    def setup(self, config: dict[str, Any]) -> None:
        self._thread: _Run | None = None
        self._session: S._Session | None = None
        self._restore_ckpt: Checkpoint | None = None
        self._last_ckpt_files: dict[str, bytes] | None = None
        self._finished = False
        # Reports the function may make (requested) and that train() took (received);
        # a buffered call lets the function run ahead to the end of its window.
        self._requested = self._received = self._window_end = 0

    def _start(self) -> None:
        info = {"trial_id": self.trial_id, "trial_name": self.trial_name, "logdir": self.logdir}
        session = S._Session(info, self._restore_ckpt)
        self._session = session
        config = dict(self.config)
        fn = self._function

        def run() -> None:
            S._set_session(session)
            try:
                if self._takes_reporter:
                    out = fn(config, S.StatusReporter())
                elif self._takes_config:
                    out = fn(config)
                else:
                    out = fn()
                session.results.put(("end", out if isinstance(out, dict) else None))
            except StopIteration:
                session.results.put(("end", None))
            except BaseException:
                session.results.put(("error", traceback.format_exc()))

        S._set_session(session)  # for get_checkpoint() in the actor's main thread too
        runner: _RunnerThread | None = getattr(self, "_runner", None)
        name = f"trial-{self.trial_id}"
        started = runner.submit(run, name) if runner is not None and not runner.busy() else None
        if started is None:
            runner = self._runner = _RunnerThread()
            started = runner.submit(run, name)
        self._thread = started

    def _request_up_to(self, target: int) -> None:
        """Let the function make reports until ``target`` have been requested."""
        if self._thread is None:
            self._start()
            self._requested = self._received + 1  # it runs to its first report
        assert self._session is not None
        if target > self._requested:
            self._session.resume.release(target - self._requested)
            self._requested = target

    def step(self) -> dict[str, Any]:
        if self._finished:
            return {R.DONE: True}
        self._request_up_to(max(self._received + 1, self._window_end))
        assert self._session is not None
        kind, payload = self._session.results.get()
        self._received += 1
        if kind == "result":
            ckpt = payload.get(S.CHECKPOINT_KEY)
            if ckpt is not None:
                self._last_ckpt_files = ckpt["files"]
            return dict(payload)
        self._finished = True
        if kind == "error":
            raise TuneError(f"Trial raised an exception. Traceback:\n{payload}")
        if payload is not None:
            return {**payload, R.DONE: True}
        return {"__duplicate__": True, R.DONE: True}

    def train_buffered(
        self, max_results: int, max_time_s: float, stop: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """As :meth:`Trainable.train_buffered`; the function runs ahead without waiting
        for each result to be taken (up to ``max_results`` reports in all)."""
        self._window_end = self._received + max_results
        try:
            return super().train_buffered(max_results, max_time_s, stop)
        finally:
            self._window_end = 0

    def train(self) -> dict[str, Any]:
        result = super().train()
        if result.get("__duplicate__"):
            # The function ended without a new report: not a new iteration.
            self._iteration -= 1
            self._iterations_since_restore -= 1
        return result

    def save_checkpoint(self, checkpoint_dir: str) -> Any:
        if self._last_ckpt_files is None:
            raise TuneError(
                "this function trainable has not reported a checkpoint: pass "
                "checkpoint=tune.Checkpoint.from_directory(...) to tune.report() so that "
                "Tune can save, pause or restart it"
            )
        unpack_directory(self._last_ckpt_files, checkpoint_dir)
        return None

    def load_checkpoint(self, checkpoint: Any) -> None:
        import shutil
        import tempfile

        self._end_thread()
        path = tempfile.mkdtemp(prefix="tune-restored-")
        shutil.copytree(checkpoint, path, dirs_exist_ok=True)
        self._restore_ckpt = Checkpoint(path)
        # Tune checked the blob these files came from (read_checkpoint_dir refuses
        # pickles it was not told to trust): to_dict() may load its dict.
        self._restore_ckpt._trusted = True
        self._last_ckpt_files = pack_directory(path)
        self._thread = None
        self._finished = False

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self._end_thread()
        self.setup(new_config)
        return True

    def cleanup(self) -> None:
        self._end_thread()

    def _end_thread(self) -> None:
        session, thread = self._session, self._thread
        if session is None or thread is None or not thread.is_alive():
            return
        session.stopping = True
        session.resume.release()
        # The results queue is unbounded (a report never waits to put): a function at a
        # report sees the stop now, one computing at its next report; a function that
        # already returned is only finishing its thread.
        thread.join(timeout=_JOIN_TIMEOUT_S)
        if thread.is_alive():  # it swallowed the StopTrial of its reports: leave it behind
            logging.getLogger(__name__).warning(
                "trial %s: its function did not return within %.0f s of being stopped "
                "(does it catch StopIteration around tune.report?)",
                self.trial_id,
                _JOIN_TIMEOUT_S,
            )
        S._set_session(None)


def _arity(fn: Callable[..., Any]) -> tuple[bool, bool]:
    """(takes_config, takes_reporter) for ``fn``."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is inspect.Parameter.empty
        ]
    except (TypeError, ValueError):
        return True, False
    if len(params) >= 2:
        return True, True
    return len(params) == 1, False


def wrap_function(fn: Callable[..., Any], name: str | None = None) -> type[FunctionTrainable]:
    """A FunctionTrainable subclass that runs ``fn``.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"a function trainable must be callable, got {type(fn).__name__}")
    takes_config, takes_reporter = _arity(fn)
    cls_name = name or getattr(fn, "__name__", "func")
    attrs = {
        "_function": staticmethod(fn),
        "_takes_config": takes_config,
        "_takes_reporter": takes_reporter,
        "__module__": __name__,
    }
    cls = type(str(cls_name), (FunctionTrainable,), attrs)
    cls.__qualname__ = cls.__name__
    return cls
