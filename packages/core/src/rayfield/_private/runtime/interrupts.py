"""Cancel of a running task without ``force``: KeyboardInterrupt in the task, as Ray does.

``rayfield.cancel(ref)`` of a running plain task makes its node mark the task cancelled
and send SIGINT to the main thread of the worker process (plain tasks run there). The
worker's handler asks its node whether a cancel of the task it runs now is pending
(``cancel_task(task_id, query=True)``) and only then raises ``KeyboardInterrupt``, so a
signal that arrives late, after that task finished and another began, stops nothing.
A signal that arrives before the task's code runs (its arguments are being fetched) is
checked when the code starts. The worker stores no result for the interrupted task and
reports it done; the node seals ``CANCELLED`` errors under its returns (``get`` raises
``TaskCancelledError``) and the worker goes on with its next task.

A task blocked in a long call into C (a ``get`` included) sees the interrupt when that
call returns; ``time.sleep`` and other calls that wake on signals see it at once.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

__all__ = ["Interrupts"]


class Interrupts:
    """The SIGINT handler of a worker process and the window in which it may interrupt.

    Call order: :meth:`install` once on the main thread; for each plain task,
    :meth:`enter` right before its code runs and :meth:`leave` right after it (in a
    ``finally``); :meth:`raised_for` tells whether a ``KeyboardInterrupt`` was this
    handler's for that task.

    Args:
        client: the worker's ``StoreClient`` (for ``cancel_task(..., query=True)``).
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._task: bytes | None = None  # the task whose code runs on the main thread now
        self._pending = False  # a signal came while no task code ran
        self._raised: bytes | None = None

    def install(self) -> None:
        """Handle SIGINT in this process (must run on the main thread)."""
        signal.signal(signal.SIGINT, self._on_signal)

    def enter(self, task_id: bytes) -> None:
        """The task's code starts now: interrupts may stop it from here on.

        Raises:
            KeyboardInterrupt: a cancel of this task arrived before its code started.
        """
        self._raised = None
        self._task = task_id
        if self._pending:
            self._check()

    def leave(self) -> None:
        """The task's code returned or raised: no interrupt may stop the worker now."""
        self._task = None

    def raised_for(self, task_id: bytes) -> bool:
        """Whether this handler raised KeyboardInterrupt to cancel ``task_id``."""
        return self._raised == task_id

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pending = True
        if self._task is not None:
            self._check()

    def _check(self) -> None:
        task_id, self._pending = self._task, False
        if task_id is None:
            return
        try:
            state = self._client.cancel_task(task_id, query=True)
        except Exception:  # the node is gone: the worker ends anyway
            return
        if state == "cancelled" and self._task == task_id:
            self._task, self._raised = None, task_id
            raise KeyboardInterrupt(f"task {task_id.hex()} was cancelled")
