"""Results of :class:`rayfield.util.multiprocessing.Pool` calls, and the callback thread."""

from __future__ import annotations

import logging
import multiprocessing as mp
import threading
from collections.abc import Callable
from typing import Any

import rayfield as rf
from rayfield import ObjectRef
from rayfield.exceptions import GetTimeoutError, RayfieldError

__all__ = ["AsyncResult", "IMapIterator", "ResultWatcher"]

logger = logging.getLogger("rayfield")
TimeoutError = mp.TimeoutError  # what get(timeout) raises, as in multiprocessing


class AsyncResult:
    """The result of ``apply_async``, ``map_async`` or ``starmap_async``.

    Args:
        refs: one ObjectRef per chunk (``map``) or a single one (``apply``).
        chunked: the refs hold lists of results to concatenate.
    """

    def __init__(
        self,
        refs: list[ObjectRef[Any]],
        chunked: bool,
        callback: Callable[[Any], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
    ) -> None:
        self._refs, self._chunked = refs, chunked
        self._callback, self._error_callback = callback, error_callback
        self._lock = threading.Lock()
        self._outcome: tuple[bool, Any] | None = None  # (success, value or exception)

    def ready(self) -> bool:
        """True if the call has finished, successfully or not."""
        return self._outcome is not None or self._wait(0)

    def successful(self) -> bool:
        """True if the call finished without raising. Raises ValueError if it is not ready."""
        if not self.ready():
            raise ValueError(f"{self!r} is not ready")
        return self._resolve(None)[0]

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the result is ready or ``timeout`` seconds (None: no limit) passed."""
        if self._outcome is None:
            self._wait(timeout)

    def get(self, timeout: float | None = None) -> Any:
        """The result; re-raises the call's exception (a ``TaskError`` of the same class).

        Raises:
            multiprocessing.TimeoutError: not ready within ``timeout`` seconds.
        """
        ok, value = self._resolve(timeout)
        if not ok:
            raise value
        return value

    def _wait(self, timeout: float | None) -> bool:
        if not self._refs:
            return True
        ready, _ = rf.wait(self._refs, num_returns=len(self._refs), timeout=timeout)
        return len(ready) == len(self._refs)

    def _resolve(self, timeout: float | None) -> tuple[bool, Any]:
        with self._lock:
            if self._outcome is None:
                try:
                    values = rf.get(self._refs, timeout=timeout) if self._refs else []
                except GetTimeoutError:
                    raise TimeoutError(f"result not ready within {timeout} s") from None
                except Exception as exc:
                    self._outcome = (False, exc)
                else:
                    self._outcome = (True, _flatten(values) if self._chunked else values[0])
            return self._outcome

    def _run_callbacks(self) -> None:
        ok, value = self._resolve(None)
        fn = self._callback if ok else self._error_callback
        if fn is not None:
            try:
                fn(value)
            except Exception:
                logger.exception("a Pool callback raised")


def _flatten(chunks: list[list[Any]]) -> list[Any]:
    return [x for chunk in chunks for x in chunk]


class IMapIterator:
    """Iterator over ``imap`` (in order) or ``imap_unordered`` (as ready) results."""

    def __init__(self, refs: list[ObjectRef[Any]], ordered: bool) -> None:
        self._refs, self._ordered = list(refs), ordered
        self._buffer: list[Any] = []

    def __iter__(self) -> IMapIterator:
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, timeout: float | None = None) -> Any:
        """The next result; re-raises the exception of a call that failed.

        Raises:
            StopIteration: no result is left.
            multiprocessing.TimeoutError: no result within ``timeout`` seconds.
        """
        if not self._buffer:
            if not self._refs:
                raise StopIteration
            ref = self._refs[0]
            if not self._ordered:
                ready, _ = rf.wait(self._refs, num_returns=1, timeout=timeout)
                if not ready:
                    raise TimeoutError(f"no result within {timeout} s")
                ref = ready[0]
            try:
                chunk = rf.get(ref, timeout=timeout)
            except GetTimeoutError:
                raise TimeoutError(f"no result within {timeout} s") from None
            except Exception:
                self._refs.remove(ref)  # the failed call's place is used up, as in multiprocessing
                raise
            self._refs.remove(ref)
            self._buffer = list(chunk)
        return self._buffer.pop(0)


class ResultWatcher:
    """A thread that runs ``callback``/``error_callback`` when results become ready."""

    def __init__(self) -> None:
        self._pending: list[AsyncResult] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def add(self, result: AsyncResult) -> None:
        """Watch ``result`` until its refs are ready, then fill it and run its callbacks."""
        if not result._refs:  # nothing to wait for (an empty map)
            result._run_callbacks()
            return
        with self._cond:
            self._pending.append(result)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="rf-pool")
                self._thread.start()
            self._cond.notify()

    def stop(self, wait: bool) -> None:
        """Stop the thread, after the pending callbacks ran (``wait``) or at once."""
        with self._cond:
            self._stopping = True
            if not wait:
                self._pending.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
                pending = list(self._pending)
            refs = [r for res in pending for r in res._refs]
            try:
                rf.wait(refs, num_returns=1, timeout=0.1)
                ready = set(rf.wait(refs, num_returns=len(refs), timeout=0)[0])
            except RayfieldError:  # rayfield was shut down under us
                return
            for res in pending:
                if all(r in ready for r in res._refs):
                    res._run_callbacks()
                    with self._cond:
                        if res in self._pending:
                            self._pending.remove(res)
