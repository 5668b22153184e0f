"""A drop-in ``multiprocessing.Pool`` whose processes are rayfield actors.

Example:
    from rayfield.util.multiprocessing import Pool

    def square(x):
        return x * x

    with Pool(processes=2) as pool:
        print(pool.map(square, range(10)))  # [0, 1, 4, ..., 81]
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import rayfield as rf
from rayfield import ObjectRef
from rayfield.util._pool_results import AsyncResult, IMapIterator, ResultWatcher

__all__ = ["AsyncResult", "IMapIterator", "Pool"]


class _PoolActor:
    """One process of the pool: runs the initializer once, then chunks of calls in order."""

    def __init__(self, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
        if initializer is not None:
            initializer(*initargs)

    def run_chunk(self, func: Callable[..., Any], chunk: list[Any], star: bool) -> list[Any]:
        return [func(*args) if star else func(args) for args in chunk]

    def apply(self, func: Callable[..., Any], args: tuple[Any, ...], kwds: dict[str, Any]) -> Any:
        return func(*args, **kwds)

    def ping(self) -> None:
        """Returns once every call submitted before it has finished (calls run in order)."""

    def exit(self) -> None:
        """Leave the pool (``maxtasksperchild``), once this call's result is stored."""
        threading.Timer(0.05, os._exit, (0,)).start()


_RemotePoolActor = rf.remote(_PoolActor)


class Pool:
    """A process pool with the ``multiprocessing.Pool`` API, on rayfield actors.

    Each process is an actor that runs ``initializer(*initargs)`` once and then calls one
    at a time, in submission order. Work is handed to the processes round-robin, in chunks;
    a call that raises fails its whole chunk (``get`` re-raises it, as a ``TaskError`` that
    is also an instance of the original exception class).
    Connects to the running rayfield, or starts one with ``rayfield.init()``.

    Args:
        processes: number of pool actors; None means the cluster's CPU count.
        initializer: called with ``initargs`` once in each process when it starts.
        maxtasksperchild: calls (chunks) a process runs before it is replaced by a fresh
            one; None keeps processes for the pool's lifetime.
        context: accepted for compatibility with ``multiprocessing.Pool`` and ignored.
        ray_remote_args: actor options for the processes, e.g. ``{"num_cpus": 1}`` to
            reserve a CPU for each (by default they hold no resources).

    Raises:
        ValueError: ``processes`` < 1 or a bad ``maxtasksperchild``.
        TypeError: ``initializer`` is not callable.
    """

    def __init__(
        self,
        processes: int | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: Iterable[Any] = (),
        maxtasksperchild: int | None = None,
        context: Any = None,
        ray_remote_args: dict[str, Any] | None = None,
    ) -> None:
        if not rf.is_initialized():
            rf.init()
        if processes is None:
            processes = int(rf.cluster_resources().get("CPU", 0)) or os.cpu_count() or 1
        if processes < 1:
            raise ValueError(f"Number of processes must be at least 1, got {processes}")
        if maxtasksperchild is not None and (
            not isinstance(maxtasksperchild, int) or maxtasksperchild < 1
        ):
            raise ValueError(f"maxtasksperchild must be an int >= 1, got {maxtasksperchild!r}")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._processes, self._maxtasks = processes, maxtasksperchild
        self._init_args = (initializer, tuple(initargs or ()))
        self._options = dict(ray_remote_args or {})
        self._lock = threading.Lock()
        self._actors = [self._new_actor() for _ in range(processes)]
        self._retired: list[Any] = []  # replaced by maxtasksperchild, leaving after their work
        self._calls = [0] * processes
        self._next = itertools.cycle(range(processes))
        self._state = "RUN"
        self._watcher = ResultWatcher()

    def _new_actor(self) -> Any:
        return _RemotePoolActor.options(**self._options).remote(*self._init_args)

    def _submit(self, method: str, *args: Any) -> ObjectRef[Any]:
        with self._lock:
            if self._state != "RUN":
                raise ValueError("Pool not running")
            i = next(self._next)
            ref: ObjectRef[Any] = getattr(self._actors[i], method).remote(*args)
            self._calls[i] += 1
            if self._maxtasks is not None and self._calls[i] >= self._maxtasks:
                self._actors[i].exit.remote()  # runs after the calls queued before it
                self._retired.append(self._actors[i])
                self._actors[i], self._calls[i] = self._new_actor(), 0
        return ref

    def _chunks(self, func: Any, iterable: Iterable[Any], size: int | None, star: bool) -> Any:
        if self._state != "RUN":
            raise ValueError("Pool not running")
        items = list(iterable)
        if size is None:
            size, extra = divmod(len(items), self._processes * 4)
            size = max(1, size + bool(extra))
        if size < 1:
            raise ValueError(f"chunksize must be 1+, not {size}")
        func_ref = rf.put(func)
        return [
            self._submit("run_chunk", func_ref, items[i : i + size], star)
            for i in range(0, len(items), size)
        ]

    def _async(
        self, refs: list[ObjectRef[Any]], chunked: bool, cb: Any, err_cb: Any
    ) -> AsyncResult:
        result = AsyncResult(refs, chunked, cb, err_cb)
        if cb is not None or err_cb is not None:
            self._watcher.add(result)
        return result

    def apply(self, func: Callable[..., Any], args: Iterable[Any] = (), kwds: Any = None) -> Any:
        """``func(*args, **kwds)`` in a pool process; blocks for the result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(
        self,
        func: Callable[..., Any],
        args: Iterable[Any] = (),
        kwds: dict[str, Any] | None = None,
        callback: Callable[[Any], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
    ) -> AsyncResult:
        """Start ``func(*args, **kwds)``; callbacks run in a pool thread when it is done."""
        ref = self._submit("apply", func, tuple(args), dict(kwds or {}))
        return self._async([ref], False, callback, error_callback)

    def map(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int | None = None
    ) -> list[Any]:
        """``[func(x) for x in iterable]`` in the pool; re-raises the first failure."""
        return self.map_async(func, iterable, chunksize).get()

    def map_async(
        self,
        func: Callable[[Any], Any],
        iterable: Iterable[Any],
        chunksize: int | None = None,
        callback: Callable[[Any], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
    ) -> AsyncResult:
        """Start :meth:`map`; the result's ``get()`` gives the list."""
        refs = self._chunks(func, iterable, chunksize, star=False)
        return self._async(refs, True, callback, error_callback)

    def starmap(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        chunksize: int | None = None,
    ) -> list[Any]:
        """``[func(*args) for args in iterable]`` in the pool."""
        return self.starmap_async(func, iterable, chunksize).get()

    def starmap_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        chunksize: int | None = None,
        callback: Callable[[Any], Any] | None = None,
        error_callback: Callable[[BaseException], Any] | None = None,
    ) -> AsyncResult:
        """Start :meth:`starmap`."""
        refs = self._chunks(func, iterable, chunksize, star=True)
        return self._async(refs, True, callback, error_callback)

    def imap(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int = 1
    ) -> IMapIterator:
        """Submit all of ``iterable`` now; iterate over the results in order."""
        return IMapIterator(self._chunks(func, iterable, chunksize, star=False), ordered=True)

    def imap_unordered(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int = 1
    ) -> IMapIterator:
        """Like :meth:`imap`, but yield each chunk's results as soon as they are ready."""
        return IMapIterator(self._chunks(func, iterable, chunksize, star=False), ordered=False)

    def close(self) -> None:
        """Accept no more work; the processes exit once :meth:`join` saw the work done."""
        with self._lock:
            if self._state == "RUN":
                self._state = "CLOSE"

    def terminate(self) -> None:
        """Stop at once: drop waiting callbacks and stop the processes."""
        with self._lock:
            state, self._state = self._state, "TERMINATE"
            actors, self._actors = self._actors, []
        self._watcher.stop(wait=False)
        if state != "TERMINATE":
            for actor in actors:
                rf.kill(actor)

    def join(self) -> None:
        """Wait for all submitted work and callbacks, then stop the processes.

        Raises:
            ValueError: the pool is still running (call :meth:`close` first).
        """
        if self._state == "RUN":
            raise ValueError("Pool is still running")
        pings = [a.ping.remote() for a in (*self._actors, *self._retired)]
        if pings:  # each actor runs its calls in order: a ping is done when its work is
            rf.wait(pings, num_returns=len(pings))
        self._watcher.stop(wait=True)
        self.terminate()

    def __enter__(self) -> Pool:
        if self._state != "RUN":
            raise ValueError("Pool not running")
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()
