"""A first-in, first-out queue shared by the driver, tasks and actors.

The items live in an async actor; a :class:`Queue` object is a small picklable front for
it, so passing the queue to a task or an actor shares the same items.

Example:
    import rayfield as rf
    from rayfield.util import Queue

    @rf.remote
    def produce(q, n):
        for i in range(n):
            q.put(i)

    q = Queue(maxsize=10)
    rf.get(produce.remote(q, 3))
    print([q.get(timeout=5) for _ in range(3)])  # [0, 1, 2]
"""

from __future__ import annotations

import asyncio
import queue as _stdlib_queue
from collections.abc import Iterable
from typing import Any

import rayfield as rf

__all__ = ["Empty", "Full", "Queue"]


class Empty(_stdlib_queue.Empty):
    """Raised by ``get`` when no item came in time, or at once with ``block=False``."""


class Full(_stdlib_queue.Full):
    """Raised by ``put`` when no slot came free in time, or at once with ``block=False``."""


class _QueueActor:
    """Holds the items in an ``asyncio.Queue``; blocking calls wait on the actor's loop.

    Results are ``(ok, value)`` pairs so that ``Empty`` and ``Full`` reach the caller as
    plain outcomes, not as remote errors with tracebacks.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._queue: asyncio.Queue[Any] | None = None

    @property
    def queue(self) -> asyncio.Queue[Any]:
        # Created on first use, on the actor's event loop (the constructor runs elsewhere).
        if self._queue is None:
            self._queue = asyncio.Queue(self.maxsize)
        return self._queue

    async def qsize(self) -> int:
        return self.queue.qsize()

    async def put(self, item: tuple[Any], timeout: float | None) -> bool:
        try:
            if timeout == 0:  # wait_for(..., 0) would cancel even a put that has room
                self.queue.put_nowait(item[0])
            else:
                await asyncio.wait_for(self.queue.put(item[0]), timeout)
        except (asyncio.QueueFull, asyncio.TimeoutError):
            return False
        return True

    async def put_nowait_batch(self, items: list[Any]) -> bool:
        if self.maxsize > 0 and self.queue.qsize() + len(items) > self.maxsize:
            return False
        for item in items:
            self.queue.put_nowait(item)
        return True

    async def get(self, timeout: float | None) -> tuple[bool, Any]:
        try:
            if timeout == 0:
                return True, self.queue.get_nowait()
            return True, await asyncio.wait_for(self.queue.get(), timeout)
        except (asyncio.QueueEmpty, asyncio.TimeoutError):
            return False, None

    async def get_nowait_batch(self, n: int) -> tuple[bool, Any]:
        if self.queue.qsize() < n:
            return False, self.queue.qsize()
        return True, [self.queue.get_nowait() for _ in range(n)]


_RemoteQueueActor = rf.remote(_QueueActor)


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError(f"'timeout' must be None or a non-negative number, got {timeout}")


class Queue:
    """A FIFO queue usable from the driver, tasks and actors (pass the object around).

    Items are stored by value; an ObjectRef put in the queue comes out as the same
    ObjectRef, not as its value.

    Args:
        maxsize: the most items the queue holds; 0 or less means no limit.
        actor_options: options for the queue's actor, as for ``ActorClass.options``
            (e.g. ``{"num_cpus": 0, "name": "jobs"}``).
    """

    def __init__(self, maxsize: int = 0, actor_options: dict[str, Any] | None = None) -> None:
        self.maxsize = maxsize
        self.actor: Any = _RemoteQueueActor.options(**(actor_options or {})).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def _handle(self) -> Any:
        if self.actor is None:
            raise RuntimeError("the queue was shut down")
        return self.actor

    def size(self) -> int:
        """The number of items in the queue right now."""
        return int(rf.get(self._handle().qsize.remote()))

    def qsize(self) -> int:
        """The number of items in the queue right now (``queue.Queue`` spelling)."""
        return self.size()

    def empty(self) -> bool:
        """True if the queue holds no item right now."""
        return self.size() == 0

    def full(self) -> bool:
        """True if the queue has a ``maxsize`` and holds that many items right now."""
        return self.maxsize > 0 and self.size() >= self.maxsize

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Add ``item`` at the end of the queue.

        Args:
            item: any serializable value.
            block: wait for a free slot when the queue is full; False fails at once.
            timeout: with ``block``, seconds to wait at most; None waits as long as it takes.

        Raises:
            Full: no slot was free (at once, or within ``timeout``).
            ValueError: a negative ``timeout``.
        """
        _check_timeout(timeout)
        wait_s = timeout if block else 0
        if not rf.get(self._handle().put.remote((item,), wait_s)):
            raise Full(f"the queue is full (maxsize={self.maxsize})")

    def put_nowait(self, item: Any) -> None:
        """``put(item, block=False)``: raises :class:`Full` at once if there is no slot."""
        self.put(item, block=False)

    def put_nowait_batch(self, items: Iterable[Any]) -> None:
        """Add all ``items`` at once, in order, or none of them.

        Raises:
            Full: the queue has a ``maxsize`` and no room for all of the items.
        """
        batch = list(items)
        if not rf.get(self._handle().put_nowait_batch.remote(batch)):
            raise Full(f"no room for {len(batch)} items in the queue (maxsize={self.maxsize})")

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return the item at the front of the queue.

        Args:
            block: wait for an item when the queue is empty; False fails at once.
            timeout: with ``block``, seconds to wait at most; None waits as long as it takes.

        Raises:
            Empty: no item came (at once, or within ``timeout``).
            ValueError: a negative ``timeout``.
        """
        _check_timeout(timeout)
        wait_s = timeout if block else 0
        ok, item = rf.get(self._handle().get.remote(wait_s))
        if not ok:
            raise Empty("the queue is empty")
        return item

    def get_nowait(self) -> Any:
        """``get(block=False)``: raises :class:`Empty` at once if there is no item."""
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> list[Any]:
        """Remove and return the first ``num_items`` items, or none of them.

        Raises:
            Empty: fewer than ``num_items`` items are in the queue.
            ValueError: ``num_items`` is not an integer >= 0.
        """
        if not isinstance(num_items, int) or num_items < 0:
            raise ValueError(f"'num_items' must be an integer >= 0, got {num_items!r}")
        ok, items = rf.get(self._handle().get_nowait_batch.remote(num_items))
        if not ok:
            raise Empty(f"cannot get {num_items} items from a queue holding {items}")
        return list(items)

    def shutdown(self) -> None:
        """Kill the queue's actor: its items are lost and every copy of the queue stops working.

        Calls blocked in ``get`` or ``put`` elsewhere raise ``ActorDiedError``; calls on this
        object afterwards raise ``RuntimeError``. Safe to call twice.
        """
        if self.actor is not None:
            rf.kill(self.actor)
            self.actor = None
