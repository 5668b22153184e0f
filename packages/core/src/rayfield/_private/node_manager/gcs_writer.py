"""The node's writes to the GCS that no caller waits for, on a thread of their own.

Object locations (new copies in this node's store, results being made on the nodes this
node forwarded tasks to) and actor records (moved, alive, restarting, dead) are written by
:class:`GcsWriter`: callers queue a write and return at once, so a GCS that is slow or
down (being restarted) never holds up the threads that fetch objects, route actor calls
or handle the native core's events. Writes run in the order they were queued; object
locations are merged instead: one ``AddObjectLocations`` a node per round, then one
``RemoveObjectLocations`` a node for copies that went (evicted or deleted here), then
one that forgets every copy of objects that were freed. A removal queued after an add of
the same pair cancels that add (and an add a queued removal), so the directory ends as
the last call said, whatever the order of the rounds. While the GCS is
unreachable the write at the head of the queue is tried again, with a delay doubling
from 50 ms to 1 s, until it goes through: nothing queued is dropped because the GCS was
down, however long; so are this node's object locations while the GCS does not know the
node as alive (a GCS restarted on a fresh database, or one that declared the node dead:
the next heartbeat registers it again). Locations go ``MAX_LOCATIONS_A_CALL`` at a time,
so a backlog never holds the GCS for long. Any other write the GCS refuses (e.g. the
locations of another node it declared dead) is logged and dropped.

:meth:`GcsWriter.stop` sends what is queued while the GCS answers, within a time limit.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from rayfield._private.gcs.client import GcsClient
from rayfield._private.protocol.errors import GcsNotFoundError, GcsUnavailableError

__all__ = ["GcsWriter"]

logger = logging.getLogger("rayfield")

FIRST_RETRY_S = 0.05  # the delay before a write is tried again; it doubles up to MAX_RETRY_S
MAX_RETRY_S = 1.0
MAX_LOCATIONS_A_CALL = 1000  # object ids in one AddObjectLocations

Write = Callable[[GcsClient], object]


class GcsWriter:
    """Runs queued GCS writes on one thread, in order; see the module docstring.

    Args:
        gcs: the cluster's GCS client. Each try is one call (``with_limits``: no retry
            inside the client, ``gcs.timeout_s`` an attempt), so :meth:`stop` is never
            stuck behind the client's retry deadline.
        node_id: this node's id (its locations wait for it to be registered again).
    """

    def __init__(self, gcs: GcsClient, node_id: bytes) -> None:
        self.gcs = gcs.with_limits(gcs.timeout_s, retry_deadline_s=0.0)
        self.node_id = node_id
        self._cond = threading.Condition()
        # (what, the write, whether a GcsNotFoundError is retried like an unreachable GCS)
        self._writes: deque[tuple[str, Write, bool]] = deque()
        # node id -> object ids to record / to forget there (dicts: ordered sets);
        # b"" in _removals: forget every node's copy (the objects were freed)
        self._locations: dict[bytes, dict[bytes, None]] = {}
        self._removals: dict[bytes, dict[bytes, None]] = {}
        self._busy = False  # a write is running or waiting to be tried again
        self._stop = False
        self._stopping = threading.Event()  # ends a retry's delay (new writes do not)
        self._closing = False  # stop() began: the node is not registered again
        self._thread = threading.Thread(target=self._run, daemon=True, name="rayfield-gcs-writer")

    def start(self) -> None:
        self._thread.start()

    def write(self, what: str, fn: Write) -> None:
        """Queue ``fn(gcs)``; ``what`` names it in the log if the GCS refuses it."""
        with self._cond:
            self._writes.append((what, fn, False))
            self._cond.notify()

    def add_locations(self, node_id: bytes, object_ids: Iterable[bytes]) -> None:
        """Queue recording the node ``node_id`` as a holder of ``object_ids``."""
        ids = list(object_ids)
        if not ids:
            return
        with self._cond:
            _drop(self._removals, node_id, ids)
            self._locations.setdefault(node_id, {}).update(dict.fromkeys(ids))
            self._cond.notify()

    def remove_locations(self, node_id: bytes, object_ids: Iterable[bytes]) -> None:
        """Queue forgetting that ``node_id`` holds ``object_ids`` (its copies went);
        ``node_id`` empty: forget every node's copy (the objects were freed)."""
        ids = list(object_ids)
        if not ids:
            return
        with self._cond:
            for nid in [node_id] if node_id else list(self._locations):
                _drop(self._locations, nid, ids)
            self._removals.setdefault(node_id, {}).update(dict.fromkeys(ids))
            self._cond.notify()

    def pending(self) -> int:
        """How many writes are queued or running (each node's locations count one, and
        its removals one)."""
        with self._cond:
            queued = len(self._writes) + len(self._locations) + len(self._removals)
            return queued + int(self._busy)

    def _next(self) -> tuple[str, Write, bool] | None:
        """The next write (locations merged a node, ``MAX_LOCATIONS_A_CALL`` at most), or
        None to stop; waits for one. Called with the condition held."""
        while not self._writes and not self._locations and not self._removals:
            if self._stop:
                return None
            self._cond.wait()
        if self._writes:
            return self._writes.popleft()
        if self._locations:
            node_id, ids = _take(self._locations)
            return (
                f"record {len(ids)} object location(s) of node {node_id.hex()[:12]}",
                lambda gcs: gcs.add_object_locations(node_id, ids),
                node_id == self.node_id,
            )
        node_id, ids = _take(self._removals)
        where = f"of node {node_id.hex()[:12]}" if node_id else "of freed objects"
        return (
            f"forget {len(ids)} object location(s) {where}",
            lambda gcs: gcs.remove_object_locations(node_id, ids),
            False,
        )

    def _run(self) -> None:
        while True:
            with self._cond:
                item = self._next()
                if item is None:
                    return
                self._busy = True
            try:
                self._until_done(*item)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _until_done(self, what: str, fn: Write, not_found_waits: bool) -> None:
        """Try ``fn`` until the GCS takes or refuses it (or the writer stops)."""
        delay = FIRST_RETRY_S
        while True:
            try:
                fn(self.gcs)
                return
            except GcsUnavailableError as exc:
                logger.debug("GCS unreachable, %s later: %s", what, exc)
            except GcsNotFoundError as exc:
                if not not_found_waits or self._closing:
                    logger.warning("could not %s in the GCS: %s", what, exc)
                    return
                logger.debug("%s once this node is registered again: %s", what, exc)
            except Exception as exc:
                logger.warning("could not %s in the GCS: %s", what, exc)
                return
            if self._stopping.wait(delay):
                return
            delay = min(2 * delay, MAX_RETRY_S)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued write is done, at most ``timeout_s``; whether all are."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._writes or self._locations or self._removals or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def stop(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (while the GCS answers, at most ``timeout_s``), then stop
        the thread; what is left is logged. This node's locations no longer wait for it to
        be registered again (its heartbeat has stopped)."""
        self._closing = True
        if self._thread.is_alive():
            self.flush(timeout_s)
        with self._cond:
            self._stop = True
            self._stopping.set()
            left = len(self._writes) + len(self._locations) + len(self._removals)
            left += int(self._busy)
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=self.gcs.timeout_s)
        if left:
            logger.warning("stopping with %d GCS write(s) not sent (the GCS did not answer)", left)


def _drop(queued: dict[bytes, dict[bytes, None]], node_id: bytes, ids: list[bytes]) -> None:
    """Take ``ids`` out of what ``queued`` holds for ``node_id``."""
    mine = queued.get(node_id)
    if mine:
        for oid in ids:
            mine.pop(oid, None)
        if not mine:
            del queued[node_id]


def _take(queued: dict[bytes, dict[bytes, None]]) -> tuple[bytes, list[bytes]]:
    """The first node's first ``MAX_LOCATIONS_A_CALL`` ids, taken out of ``queued``."""
    node_id = next(iter(queued))
    ids = queued[node_id]
    batch = list(itertools.islice(ids, MAX_LOCATIONS_A_CALL))
    for oid in batch:
        del ids[oid]
    if not ids:
        del queued[node_id]
    return node_id, batch
