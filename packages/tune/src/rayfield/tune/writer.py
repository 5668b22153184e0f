"""``BackgroundWriter``: the driver's file writes, done in order on one thread.

The driver loop hands every file operation of an experiment (trial directories, result
files, the experiment state) to one thread as a closure, so that opening, writing and
syncing files overlaps the time the loop waits for the trials' actors. Operations run in
the order they were submitted: the experiment state, submitted after the flush of the
result files, never reaches the disk ahead of the results it describes.

With ``held=True`` submitted operations wait until :meth:`BackgroundWriter.release`: the
driver loop releases them just before it blocks for the next results, so the thread's
work (which holds the GIL while it encodes) never delays the loop's decisions on the
results that came in.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundWriter"]

log = logging.getLogger(__name__)

_STOP = object()


class BackgroundWriter:
    """Runs submitted closures one by one on a daemon thread.

    An operation that raises is logged; the first such error is raised again by the next
    :meth:`drain` or :meth:`close`, so a failing disk does not go unnoticed.

    Args:
        name: the thread's name.
        held: keep submitted operations until :meth:`release` (or a drain or close).
    """

    def __init__(self, name: str = "tune-writer", held: bool = False) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self._held: list[Callable[[], Any]] | None = [] if held else None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                # One queue item is one operation, or the list of a release's operations.
                for op in item if isinstance(item, list) else (item,):
                    try:
                        op()
                    except BaseException as exc:
                        log.warning("tune file write failed: %s", exc)
                        if self._error is None:
                            self._error = exc
            finally:
                self._queue.task_done()

    def submit(self, op: Callable[[], Any]) -> None:
        """Run ``op()`` on the writer thread after every operation submitted before it
        (with ``held``, once released).

        Raises:
            RuntimeError: the writer was closed.
        """
        if not self._thread.is_alive():
            raise RuntimeError("the tune writer is closed: no more writes are accepted")
        if self._held is not None:
            self._held.append(op)
        else:
            self._queue.put(op)

    def release(self) -> None:
        """Hand the held operations to the thread (in order) as one queue item: one
        wake-up of the thread however many there are (each wake-up can cost the caller
        the GIL for a switch interval, 5 ms); nothing without ``held``."""
        if self._held:
            ops, self._held = self._held, []
            self._queue.put(ops)

    def drain(self) -> None:
        """Wait until every submitted operation has run.

        Raises:
            BaseException: the first error an operation raised since the last drain.
        """
        self.release()
        if self._thread.is_alive():
            self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Run what is queued, then end the thread (idempotent).

        Raises:
            BaseException: as :meth:`drain`.
        """
        self.release()
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self.drain()
