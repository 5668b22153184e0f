"""Tasks a node forwards to other nodes, sent in batches: one queue and sender a peer.

Forwarding a task one ``ForwardTask`` call at a time cost each side a gRPC call (a few
hundred microseconds of Python on two shared cores) and held the caller, the node's
event thread, for the round trip. A :class:`Forwarder` queues each task for its
destination and returns at once; the destination's sender thread sends everything
queued so far in one ``ForwardTasks`` call (so batches grow by themselves while a call
is on the wire) and reports each task's outcome, in the order the tasks were queued,
to the callback given with it. A call that fails as a whole (the peer is gone, a
timeout) is a refusal of each of its tasks, with the gRPC error as the reason.

The callbacks hold the per-task semantics (``spillback.py``): an accepted task's
bookkeeping, a refused one tried on the next candidate or submitted again here.

Retries never run a task twice. A call whose reply is lost or late (a timeout, the peer
unreachable for a moment) may have been carried out in part, so the sender repeats the
same call to the same peer (``NodeAgent.send_batch``, up to ``SEND_ATTEMPTS`` times) before it
treats the batch as refused; the peer remembers the tasks it accepted
(:class:`AcceptedTasks`: their ids, bounded by count and age) and answers a task it took
already with "accepted" without queueing it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rayfield._private.node_manager.task_spec import TaskSpec

logger = logging.getLogger("rayfield")

MAX_BATCH_TASKS = 256
MAX_BATCH_BYTES = 16 << 20  # payloads in one call (the node service takes 64 MiB)
SEND_ATTEMPTS = 4  # a call that timed out or found the peer unreachable, sent again
MAX_ACCEPTED = 100_000  # ids of tasks a node accepted from others, remembered
ACCEPTED_MAX_AGE_S = 600.0  # and for at most this long (a retry comes within seconds)

# send(address, [(spec, pushed), ...]) -> one outcome a task: None (accepted) or why not
SendBatchFn = Callable[[str, Sequence[tuple[TaskSpec, list[bytes]]]], list[str | None]]
# done(why): None when the peer took the task, else the reason it did not
DoneFn = Callable[[str | None], None]


T = TypeVar("T")


def batches(items: Sequence[T], spec_of: Callable[[T], TaskSpec]) -> Iterator[list[T]]:
    """``items`` (a task each, its spec ``spec_of(item)``) in order, cut into batches of
    at most ``MAX_BATCH_TASKS`` tasks and ``MAX_BATCH_BYTES`` of payloads (a larger task
    goes alone)."""
    batch: list[T] = []
    size = 0
    for spec in items:
        n = len(spec_of(spec).payload)
        if batch and (len(batch) >= MAX_BATCH_TASKS or size + n > MAX_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(spec)
        size += n
    if batch:
        yield batch


class AcceptedTasks:
    """The ids of tasks this node accepted from other nodes, oldest first.

    A retried ``ForwardTasks`` call carries tasks the first call may have queued already;
    :meth:`take` tells them apart. Memory is bounded: at most ``max_ids`` ids, each for at
    most ``max_age_s`` seconds. Not thread-safe (the agent holds its lock).

    Args:
        max_ids: ids kept at most (the oldest go first).
        max_age_s: seconds an id is kept at most.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        max_ids: int = MAX_ACCEPTED,
        max_age_s: float = ACCEPTED_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_ids = max_ids
        self.max_age_s = max_age_s
        self.clock = clock
        self._ids: OrderedDict[bytes, float] = OrderedDict()  # task id -> when accepted

    def take(self, task_id: bytes) -> bool:
        """Record ``task_id`` as accepted; False when it was accepted already (a retry)."""
        now = self.clock()
        self._expire(now)
        if task_id in self._ids:
            return False
        self._ids[task_id] = now
        while len(self._ids) > self.max_ids:
            self._ids.popitem(last=False)
        return True

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self) -> set[bytes]:
        """The ids remembered now."""
        return set(self._ids)

    def _expire(self, now: float) -> None:
        while self._ids:
            oldest, when = next(iter(self._ids.items()))
            if now - when <= self.max_age_s:
                return
            del self._ids[oldest]


@dataclass
class _Item:
    spec: TaskSpec
    pushed: list[bytes]
    done: DoneFn


def _spec_of_item(item: _Item) -> TaskSpec:
    return item.spec


class Forwarder:
    """Sends queued tasks to each peer in batches, on one thread per peer.

    Args:
        send: one ``ForwardTasks`` call (``NodeStub.forward_batch`` on the peer's
            channel); an exception refuses every task of the batch.
    """

    def __init__(self, send: SendBatchFn) -> None:
        self.send = send
        self._cond = threading.Condition()
        self._queues: dict[str, list[_Item]] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._busy: set[str] = set()
        self._closed = False

    def submit(self, address: str, spec: TaskSpec, pushed: list[bytes], done: DoneFn) -> None:
        """Queue ``spec`` for the node at ``address``; ``done(why)`` is called on that
        peer's sender thread once it is known whether the peer took it."""
        with self._cond:
            if self._closed:
                closed = True
            else:
                closed = False
                self._queues.setdefault(address, []).append(_Item(spec, pushed, done))
                if address not in self._threads:
                    t = threading.Thread(
                        target=self._run, args=(address,), daemon=True, name="rayfield-forward"
                    )
                    self._threads[address] = t
                    t.start()
                self._cond.notify_all()
        if closed:
            done("the node is shutting down")

    def pending(self) -> int:
        """Tasks queued or on the wire, for every peer."""
        with self._cond:
            return sum(len(q) for q in self._queues.values()) + len(self._busy)

    def _take(self, address: str) -> list[_Item] | None:
        with self._cond:
            while not self._queues.get(address) and not self._closed:
                self._busy.discard(address)
                self._cond.wait()
            queue = self._queues.get(address) or []
            if not queue:
                self._busy.discard(address)
                return None  # closed
            n = len(next(iter(batches(queue[:MAX_BATCH_TASKS], _spec_of_item))))
            batch = queue[:n]
            del queue[:n]
            self._busy.add(address)
            return batch

    def _run(self, address: str) -> None:
        while True:
            batch = self._take(address)
            if batch is None:
                return
            try:
                outcomes = self.send(address, [(i.spec, i.pushed) for i in batch])
                if len(outcomes) != len(batch):
                    raise RuntimeError(f"{len(outcomes)} replies to {len(batch)} forwarded tasks")
            except Exception as exc:
                outcomes = [f"{type(exc).__name__}: {exc}"] * len(batch)
            for item, outcome in zip(batch, outcomes, strict=True):
                try:
                    item.done(outcome)
                except Exception:
                    logger.exception("bookkeeping of a task forwarded to %s failed", address)

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the senders; tasks still queued are refused (``done`` with a reason)."""
        with self._cond:
            self._closed = True
            left = [i for q in self._queues.values() for i in q]
            self._queues.clear()
            self._cond.notify_all()
            threads = list(self._threads.values())
        for item in left:
            try:
                item.done("the node is shutting down")
            except Exception:
                logger.exception("bookkeeping of a task not forwarded failed")
        for t in threads:
            t.join(timeout=timeout_s)
