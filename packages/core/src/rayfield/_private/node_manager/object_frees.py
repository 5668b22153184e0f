"""Freed objects leave every node, and the GCS object directory, at once.

The node's store reports each object it removes (the subscription of
:class:`~.object_push.ObjectPusher`'s connection): ``deleted`` when a client freed it,
``evicted`` when room was needed. :class:`ObjectFrees` asks the pure
:class:`~.copies.CopyBook` what that means and carries it out:

* an evicted copy that this node recorded in the directory: its row goes
  (``GcsWriter.remove_locations``);
* a freed object: every row of it goes, and a large one (a pull's worth) is freed on the
  other nodes that hold a copy, those the book knows (where it came from, where it was
  pushed) and those the directory names (one lookup per batch, a single try: while the
  GCS is down only the known ones are told). Their ``FreeObjects`` handler deletes the
  copy (at once if nothing there uses it, else when the last use ends) and drops any hold
  on it, so a node that pulled a dead object reuses its memory for the next one
  instead of faulting in fresh pages and filling its store with dead copies.

The frees run on a thread of their own, in batches (one lookup and one call per node
for everything freed meanwhile), so the store's notifications are never held up by the
GCS or a peer. A peer that cannot be told (it died, or is an older node without
``FreeObjects``) keeps its copy until its store evicts it, as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from rayfield._private.common.ids import short
from rayfield._private.gcs.client import GcsClient
from rayfield._private.node_manager.copies import CopyBook, Freed, Unrecord
from rayfield._private.node_manager.gcs_writer import GcsWriter
from rayfield._private.node_manager.membership import PeerView

__all__ = ["ObjectFrees"]

logger = logging.getLogger("rayfield")

LOOKUP_TIMEOUT_S = 2.0  # one directory lookup of a batch of freed objects; not retried

# send(address, object_ids): tell that node to drop its copies; may raise
SendFreeFn = Callable[[str, list[bytes]], None]


class ObjectFrees:
    """Acts on the removals of this node's store; see the module docstring.

    Args:
        node_id: this node's id (its own rows in the directory).
        address: this node's service address (never told to free anything).
        gcs: the cluster's GCS client (directory lookups).
        writer: queues the directory's removals.
        peers: the cluster's nodes (the addresses of the holders the directory names).
        send_free: tells another node to drop its copies (``NodeStub.free``).
        book: the bookkeeping (a new one if None).
    """

    def __init__(
        self,
        node_id: bytes,
        address: str,
        gcs: GcsClient,
        writer: GcsWriter,
        peers: PeerView,
        send_free: SendFreeFn,
        book: CopyBook | None = None,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.gcs = gcs.with_limits(LOOKUP_TIMEOUT_S, retry_deadline_s=0.0)
        self.writer = writer
        self.peers = peers
        self.send_free = send_free
        self.book = book if book is not None else CopyBook()
        self.freed_here = 0  # objects freed here whose other copies were looked for
        self.freed_by_peers = 0  # objects other nodes told this one to drop
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[Freed] = []
        self._busy = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="rayfield-frees")

    def start(self) -> None:
        self._thread.start()

    # ---- what the other parts report ------------------------------------------------

    def record(self, object_ids: list[bytes]) -> None:
        """This node recorded itself as a holder of ``object_ids`` in the directory."""
        with self._lock:
            self.book.record(object_ids)

    def copied(self, object_ids: Iterable[bytes], address: str) -> None:
        """The node at ``address`` holds or gets a copy of ``object_ids``."""
        with self._lock:
            self.book.copied(object_ids, address)

    def node_died(self, address: str) -> None:
        with self._lock:
            self.book.node_died(address)

    def removed(self, object_id: bytes, evicted: bool, size: int) -> None:
        """The store removed ``object_id`` (``size`` bytes of data): ``evicted``, or
        deleted because its owner freed it (a store notification)."""
        with self._lock:
            action = self.book.gone(object_id, evicted, size)
            if isinstance(action, Freed) and (action.ask_gcs or action.peers):
                self._queue.append(action)
                self._cond.notify()
                return
        if isinstance(action, Unrecord):
            self.writer.remove_locations(self.node_id, [object_id])
        elif isinstance(action, Freed):  # only rows to forget: the writer merges them
            self.writer.remove_locations(b"", [object_id])

    def freed_elsewhere(self, object_ids: list[bytes]) -> None:
        """Another node freed ``object_ids`` (``FreeObjects``): forget them here, and this
        node's rows of them (in case its own record of them is still queued)."""
        with self._lock:
            recorded = self.book.freed_elsewhere(object_ids)
            self.freed_by_peers += len(object_ids)
        self.writer.remove_locations(self.node_id, recorded)

    # ---- the thread -----------------------------------------------------------------

    def pending(self) -> int:
        """How many freed objects wait to be carried out, or are being."""
        with self._lock:
            return len(self._queue) + int(self._busy)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                batch, self._queue = self._queue, []
                self._busy = True
            try:
                self._free(batch)
            except Exception:
                logger.exception("freeing %d objects on the other nodes failed", len(batch))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _free(self, batch: list[Freed]) -> None:
        """Forget every row of ``batch`` in the directory and tell the nodes that hold
        copies to drop them."""
        ask = [f.object_id for f in batch if f.ask_gcs]
        locations: dict[bytes, list[bytes]] = {}
        looked = True
        if ask:
            try:
                locations = self.gcs.get_object_locations(ask)
            except Exception as exc:
                looked = False
                logger.debug("directory lookup of %d freed objects failed: %s", len(ask), exc)
        addresses = {n.node_id: n.address for n in self.peers.alive_peers()}
        targets: dict[str, list[bytes]] = {}
        forget = []
        for f in batch:
            rows = locations.get(f.object_id, ())
            if f.recorded or rows or not looked:
                forget.append(f.object_id)
            where = set(f.peers) | {addresses[n] for n in rows if n in addresses}
            where.discard(self.address)
            for address in where:
                targets.setdefault(address, []).append(f.object_id)
        self.writer.remove_locations(b"", forget)
        for address, ids in targets.items():
            try:
                self.send_free(address, ids)
            except Exception as exc:  # dead or older: its copies go by eviction
                logger.debug("telling %s to free %s failed: %s", address, short(ids[0]), exc)
        with self._lock:
            self.freed_here += len(batch)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued free is carried out, at most ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def stop(self) -> None:
        """End the thread (what is queued is dropped: the other copies go by eviction)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
