"""Objects between this node and the others: fetches, long polls, pushes received.

:class:`ObjectManager` carries out what the pure :class:`~.fetch_state.FetchState` decides
(see ``fetch_state.py`` for the rules): its fetch thread wakes when something is due,
long-polls the nodes making wanted results (``FetchObjects``, whose reply carries the
small ones whole), looks objects up in the GCS directory and asks every alive node, and
pulls objects in chunks (``PullObject``) on a pool of transfer threads, writing them
straight into the local store (``transfer.py``). Pulled results are released on the node
that made them, and results their owner here freed unread are freed there once made
(``FetchState.freed``), in batches from the fetch thread.

The fetch thread never calls the GCS: lookups run on the transfer pool, and new copies
are recorded in the GCS directory by the node's :class:`~.gcs_writer.GcsWriter`. GCS
lookups (the directory, code) are single tries (``LOOKUP_TIMEOUT_S``): while the GCS is
unreachable the other nodes are asked at once instead, so objects and code that live on
alive nodes are found while the GCS is down (being restarted).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rayfield._private.common.code import fetch_into, is_code
from rayfield._private.common.ids import short
from rayfield._private.gcs.client import GcsClient
from rayfield._private.node_manager import fetch_state as fs
from rayfield._private.node_manager.data_pull import ChannelUnavailable, DataClient
from rayfield._private.node_manager.gcs_writer import GcsWriter
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.node_manager.node_service import PeerChannels, PeerError
from rayfield._private.node_manager.object_frees import ObjectFrees
from rayfield._private.node_manager.object_push import INLINE_MAX_BYTES
from rayfield._private.node_manager.transfer import PUT_MAX_BYTES, store_whole, write_chunks
from rayfield.store import StoreClient

__all__ = ["ObjectManager"]

logger = logging.getLogger("rayfield")

# How long a holder waits for an object still being made before answering "not here":
# short, so waiting pulls never tie up the transfer threads of either node; the puller
# asks again with a growing delay (fetch_state.FIRST_LOOKUP_S doubling to MAX_BACKOFF_S).
PULL_WAIT_MS = 200
POLL_WAIT_MS = 1000  # how long one FetchObjects long poll waits for a result being made
LOOP_WAIT_S = 0.05  # the fetch thread runs at least this often
LOOKUP_TIMEOUT_S = 2.0  # the limit of one GCS lookup (directory, code); it is not retried


class ObjectManager:
    """Fetches the objects local clients wait for; see the module docstring.

    Args:
        node_id: this node's id (recorded as the new copies' location).
        address: this node's service address.
        client: the agent's store client.
        gcs: the cluster's GCS client (object directory, code exports).
        writer: records new copies in the GCS directory.
        peers: the cluster's nodes.
        channels: stubs of the other nodes.
        on_arrival: told the objects that came from another node, a list at a time
            (their tasks need not run again; arguments pinned for them may go).
        fail: stores error objects ``(ids, tag, message)`` (``Recovery.fail``).
        waited: which of the given ids something on this node still waits for (a get, a
            wait or a task's dependency: ``NodeServer.waited``); a wanted object nothing
            waits for any more (made here and freed before the fetch loop looked) is
            dropped instead of being looked up for good. None: every one is waited for.
        data: pulls over the data channel (None: every pull uses gRPC's ``PullObject``).
        frees: told of the copies recorded here and where objects came from, so that
            freed ones leave every node (``object_frees.py``; None: nobody is told).
    """

    def __init__(
        self,
        node_id: bytes,
        address: str,
        client: StoreClient,
        gcs: GcsClient,
        writer: GcsWriter,
        peers: PeerView,
        channels: PeerChannels,
        on_arrival: Callable[[list[bytes]], None],
        fail: Callable[[list[bytes], str, str], None],
        waited: Callable[[list[bytes]], list[bool]] | None = None,
        data: DataClient | None = None,
        frees: ObjectFrees | None = None,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.client = client
        self.gcs = gcs.with_limits(LOOKUP_TIMEOUT_S, retry_deadline_s=0.0)
        self.writer = writer
        self.peers = peers
        self.channels = channels
        self.on_arrival = on_arrival
        self.fail = fail
        self.waited = waited
        self.data = data
        self.frees = frees
        self.state = fs.FetchState(is_code)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.bytes_received = 0  # of objects from other nodes (the /metrics counter)
        self._to_release: dict[str, list[bytes]] = {}  # address -> ids it may drop
        self._to_free: dict[str, list[bytes]] = {}  # address -> abandoned ids it frees
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="rayfield-transfer")
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rayfield-fetch")

    def start(self) -> None:
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the transfer pool.

        Raises:
            RuntimeError: the pool is shut down (the node is stopping).
        """
        self._pool.submit(fn, *args)

    # ---- events -------------------------------------------------------------------

    def missing(self, object_id: bytes) -> None:
        """A local client waits for ``object_id``, which the node lacks."""
        with self._lock:
            actions = self.state.missing(object_id, time.monotonic())
        self._act(actions)

    def want(self, object_id: bytes, hint: str | None = None, delay_s: float = 0.0) -> None:
        """Fetch ``object_id`` (from ``hint`` first) after ``delay_s`` (an object on its
        way here by a push is asked for only if it does not come)."""
        with self._lock:
            actions = self.state.want(object_id, time.monotonic(), hint, delay_s)
        self._act(actions)

    def freed(self, object_ids: Iterable[bytes], *, copy_here: bool) -> None:
        """The local store reports ``object_ids`` deleted (their owner freed them): none
        is wanted any more, and those being made elsewhere and never copied here are
        abandoned (freed on their maker once made there). ``copy_here``: the store held
        a copy of each (``FetchState.freed``)."""
        now = time.monotonic()
        with self._lock:
            actions = [
                a for oid in object_ids for a in self.state.freed(oid, now, copy_here=copy_here)
            ]
        self._act(actions)

    def job_gone(self, job_id: bytes) -> None:
        """The driver of ``job_id`` exited: the results of its work still being made on
        other nodes are freed there once made (``FetchState.job_gone``)."""
        with self._lock:
            actions = self.state.job_gone(job_id, time.monotonic())
        self._act(actions)

    def made_at(
        self, object_ids: Iterable[bytes], address: str, node_id: bytes | None = None
    ) -> None:
        """``object_ids`` are being made by the node at ``address``; with ``node_id``
        (that node's id), record that node as their location in the GCS directory. Without
        it (results of actor calls) neither that node nor this one, once they are back
        here, is recorded (``FetchState.made_at``)."""
        ids = list(object_ids)
        now = time.monotonic()
        listed = node_id is not None
        with self._lock:
            actions = [a for oid in ids for a in self.state.made_at(oid, address, now, listed)]
        if node_id is not None:
            self.writer.add_locations(node_id, ids)
        self._act(actions)

    def hold(self, object_ids: Iterable[bytes]) -> None:
        """``object_ids`` are made here for another node's task: not fetched here."""
        with self._lock:
            self.state.hold(object_ids)

    def is_held(self, object_id: bytes) -> bool:
        with self._lock:
            return object_id in self.state.held

    def release_held(self, object_ids: Iterable[bytes]) -> None:
        """The node that wanted ``object_ids`` has its copies: unpin them here."""
        with self._lock:
            mine = self.state.unhold(object_ids)
        if mine:
            self.client.unpin(mine)

    def receive_push(
        self, object_id: bytes, sender: str, size: int, meta: bytes, data: Any
    ) -> bool:
        """Store an object the node at ``sender`` pushed. ``data`` None (a large object):
        pull it now if a client here waits for it, else when one does. Returns whether
        it is here now."""
        if data is None:
            with self._lock:
                actions = self.state.announced_by(object_id, sender)
            self._act(actions)
            return False
        return self._store_whole(object_id, sender, size, meta, data, release=False)

    def node_died(self, address: str) -> None:
        with self._lock:
            self.state.node_died(address)

    # ---- carrying out actions -----------------------------------------------------

    def _act(self, actions: list[fs.Action]) -> None:
        recorded: list[bytes] = []
        released: list[fs.Release] = []
        discarded: list[fs.Discard] = []
        for action in actions:
            if isinstance(action, fs.Wake):
                self._wake.set()
            elif isinstance(action, fs.Fetch):
                self._pool.submit(self._fetch, action.object_id, action.addresses)
            elif isinstance(action, fs.Poll):
                self._pool.submit(self._poll, action.address, list(action.object_ids))
            elif isinstance(action, fs.LookUp):
                self._pool.submit(self._look_up, list(action.object_ids))
            elif isinstance(action, fs.Lost):
                self._lost(action.object_id)
            elif isinstance(action, fs.Recorded):
                recorded.append(action.object_id)
            elif isinstance(action, fs.Release):
                released.append(action)
            elif isinstance(action, fs.Discard):
                discarded.append(action)
        if recorded:
            if self.frees is not None:
                self.frees.record(recorded)
            self.writer.add_locations(self.node_id, recorded)
        if released:
            with self._lock:
                for r in released:
                    self._to_release.setdefault(r.address, []).append(r.object_id)
        if discarded:
            with self._lock:
                for d in discarded:
                    self._to_free.setdefault(d.address, []).append(d.object_id)
            listed = [d.object_id for d in discarded if d.listed]
            if listed:
                self.writer.remove_locations(b"", listed)
            self.on_arrival([d.object_id for d in discarded])  # their tasks ran
            self._wake.set()  # the fetch thread sends the frees

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(LOOP_WAIT_S)
            self._wake.clear()
            try:
                self.flush()
                self._round()
            except Exception:
                if self._stop.is_set():
                    return
                logger.exception("the fetch loop failed")

    def _round(self) -> None:
        now = time.monotonic()
        with self._lock:
            hinted, to_check = self.state.due(now)
        here: set[bytes] = set()
        if to_check:  # one round trip for them all (a wait that does not wait)
            flags = self.client.wait(to_check, len(to_check), timeout_s=0)
            here = {oid for oid, sealed in zip(to_check, flags, strict=True) if sealed}
        absent = [oid for oid in to_check if oid not in here]
        if absent and self.waited is not None:
            flags = self.waited(absent)
            here.update(oid for oid, waited in zip(absent, flags, strict=True) if not waited)
        with self._lock:
            for oid in here:
                self.state.here(oid)
            actions = self.state.plan(hinted + [o for o in to_check if o not in here])
        self._act(actions)

    def _look_up(self, ids: list[bytes]) -> None:
        """Find ``ids`` in the directory, else by asking every alive node (on the
        transfer pool; the GCS is asked once, the nodes at once if it does not answer)."""
        actions: list[fs.Action] = []
        try:
            try:
                locations = self.gcs.get_object_locations(ids)
            except Exception as exc:
                logger.debug("object directory lookup failed: %s", exc)
                locations = {}
            addresses = {n.node_id: n.address for n in self.peers.alive_peers()}
            unknown = []
            with self._lock:
                for oid in ids:
                    found = [addresses[n] for n in locations.get(oid, []) if n in addresses]
                    if found:
                        actions += self.state.found(oid, found)
                    else:
                        unknown.append(oid)
            holders = self._holders(unknown, set(addresses.values()))
            with self._lock:
                for oid, where in holders.items():
                    actions += self.state.found(oid, where)
            unknown = [oid for oid in unknown if oid not in holders]
            orphaned = set()
            for oid in unknown:  # made by a dead node, and not here
                maker = self.peers.maker_of(oid)
                if maker is not None and not maker.alive and not self.client.contains(oid):
                    orphaned.add(oid)
            with self._lock:
                actions += self.state.not_found(unknown, orphaned, time.monotonic())
        finally:
            with self._lock:
                self.state.looked_up(ids)
        self._act(actions)

    def _holders(self, ids: list[bytes], addresses: Iterable[str]) -> dict[bytes, list[str]]:
        """Which of the nodes at ``addresses`` hold each of ``ids`` (those held by none
        are left out); a node that does not answer holds nothing."""
        holders: dict[bytes, list[str]] = {}
        for address in addresses if ids else ():
            try:
                present = self.channels.stub(address).has_objects(ids)
            except PeerError:
                continue
            for oid, is_there in zip(ids, present, strict=False):
                if is_there:
                    holders.setdefault(oid, []).append(address)
        return holders

    def _lost(self, object_id: bytes) -> None:
        maker = self.peers.maker_of(object_id)
        where = (
            f"node {maker.node_id.hex()[:12]} ({maker.address}), which died "
            f"({maker.death_reason or 'no heartbeat'})"
            if maker is not None
            else "a node that died"
        )
        logger.warning("object %s is lost: its owner node died", object_id.hex())
        self.fail(
            [object_id],
            "LOST",
            f"object {object_id.hex()} is lost: it was made on {where}, and no alive node "
            "holds a copy. Objects made by rf.put() cannot be rebuilt; return them from a "
            "task with max_retries to have them recomputed.",
        )

    def _poll(self, address: str, ids: list[bytes]) -> None:
        """Long-poll the node at ``address`` until one of ``ids`` is there; store those
        that came whole in the reply (small ones)."""
        present: dict[bytes, bool] = dict.fromkeys(ids, False)
        stored: set[bytes] = set()
        try:
            try:
                found, whole = self.channels.stub(address).fetch_objects(
                    ids, POLL_WAIT_MS, INLINE_MAX_BYTES
                )
                present = dict(zip(ids, found, strict=False))
            except PeerError:
                whole = {}
            with self._lock:  # freed here unread: not stored (poll_done discards them)
                abandoned = [oid for oid in whole if oid in self.state.abandoned]
            for oid in abandoned:
                del whole[oid]
            stored = self._store_many(address, present, whole)
        except Exception:
            logger.exception("polling %s failed", address)
        finally:
            with self._lock:
                actions = self.state.poll_done(address, present, stored, time.monotonic())
            self._act(actions)

    def _store_many(
        self, sender: str, present: dict[bytes, bool], whole: dict[bytes, tuple[bytes, bytes]]
    ) -> set[bytes]:
        """Store the objects a long poll of the node at ``sender`` brought whole (results
        of tasks forwarded there); the ids here now. Small ones go as puts that wait for no
        reply, then one round trip asks which are sealed (a put the store refused, e.g.
        full, leaves its object to be pulled); larger ones one at a time."""
        small: list[bytes] = []
        stored: set[bytes] = set()
        for oid, (meta, data) in whole.items():
            if not present.get(oid):
                continue
            if len(data) + len(meta) > PUT_MAX_BYTES:
                if self._store_whole(oid, sender, len(data), meta, data, release=True):
                    stored.add(oid)
                continue
            try:
                self.client.put(oid, data, meta, wait=False)
            except Exception as exc:
                logger.info("could not store object %s: %s", short(oid), exc)
                continue
            small.append(oid)
        if small:
            flags = self.client.wait(small, len(small), timeout_s=0)
            here = [oid for oid, sealed in zip(small, flags, strict=True) if sealed]
            self.bytes_received += sum(len(whole[oid][1]) for oid in here)
            self._arrived_many(here, sender, release=True)
            stored.update(here)
        return stored

    def _store_whole(
        self, object_id: bytes, sender: str, size: int, meta: bytes, data: Any, release: bool
    ) -> bool:
        """Store an object that came whole from the node at ``sender``; whether it is
        here now (``release``: see ``FetchState.arrived``)."""
        stored = store_whole(self.client, object_id, size, meta, data)
        if stored:
            self.bytes_received += size
            self._arrived(object_id, sender, release)
        return stored is not False  # None: pulled meanwhile, or made here

    def _fetch(self, object_id: bytes, addresses: tuple[str, ...]) -> None:
        got, retry = False, True
        try:
            if is_code(object_id):
                got, addresses = self._fetch_code(object_id)
            if not got and addresses:
                got = self.pull_any(object_id, addresses)
        except Exception:
            logger.exception("fetching object %s failed", object_id.hex())
            retry = False
        finally:
            with self._lock:
                self.state.fetch_done(object_id, got, time.monotonic(), retry)

    def _fetch_code(self, code_id: bytes) -> tuple[bool, tuple[str, ...]]:
        """Copy code from the GCS: ``(True, ())`` once here, else ``(False, nodes)``: the
        alive nodes that hold it, when the GCS does not answer (asked again next time).
        Code the GCS lacks (too big to export) is looked up on the nodes from now on."""
        stored = fetch_into(self.gcs, self.client, code_id)
        if stored:
            return True, ()
        if stored is False:
            with self._lock:
                self.state.code_not_in_gcs(code_id)
            return False, ()
        alive = [n.address for n in self.peers.alive_peers()]
        return False, tuple(self._holders([code_id], alive).get(code_id, ()))

    def pull_any(self, object_id: bytes, addresses: tuple[str, ...]) -> bool:
        """Copy ``object_id`` from the first of ``addresses`` that has it: over the data
        channel (its chunks spread over all of them), else over gRPC one node after the
        other. Whether the object is here now."""
        if self.data is not None:
            try:
                stored, source, size = self.data.pull(
                    self.client, object_id, addresses, PULL_WAIT_MS
                )
            except ChannelUnavailable as exc:
                logger.info("pulling %s over gRPC: %s", short(object_id), exc)
            else:
                if stored:
                    self.bytes_received += size
                    self._arrived(object_id, source, release=True)
                return stored is not False
        return any(self.pull(object_id, address) for address in addresses)

    def pull(self, object_id: bytes, address: str, wait_ms: int = PULL_WAIT_MS) -> bool:
        """Copy ``object_id`` from the node at ``address`` into the local store over
        gRPC (``PullObject``).

        Returns:
            True when the object is here (pulled now, or made here meanwhile); False when
            that node does not have it (within ``wait_ms``) or cannot be reached.
        """
        try:
            chunks = self.channels.stub(address).pull(object_id, wait_ms)
            stored = write_chunks(self.client, object_id, self._counted(chunks))
        except PeerError as exc:
            logger.info("pulling %s from %s failed: %s", short(object_id), address, exc)
            return False
        if stored:
            self._arrived(object_id, address, release=True)
        return stored is not False

    def _counted(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for raw in chunks:
            self.bytes_received += len(raw)  # the chunk's few header bytes included
            yield raw

    def _arrived(self, object_id: bytes, address: str, release: bool) -> None:
        self._arrived_many([object_id], address, release)

    def _arrived_many(self, object_ids: list[bytes], address: str, release: bool) -> None:
        if not object_ids:
            return
        if self.frees is not None:
            self.frees.copied(object_ids, address)
        self.on_arrival(object_ids)
        with self._lock:
            actions = [a for oid in object_ids for a in self.state.arrived(oid, address, release)]
        self._act(actions)

    def flush(self) -> None:
        """Release pulled objects on the nodes that made them, and free the abandoned
        ones there, in batches."""
        with self._lock:
            releases, self._to_release = self._to_release, {}
            frees, self._to_free = self._to_free, {}
        for address, ids in releases.items():
            try:
                self.channels.stub(address).release(ids)
            except Exception as exc:
                logger.debug("releasing %d objects on %s failed: %s", len(ids), address, exc)
        for address, ids in frees.items():
            try:
                self.channels.stub(address).free(ids)
            except Exception as exc:  # dead: nothing to free; older: its copies get evicted
                logger.debug("freeing %d objects on %s failed: %s", len(ids), address, exc)

    def stop(self) -> None:
        """Stop the fetch thread and send the releases it had batched."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.flush()

    def close(self) -> None:
        """Drop the transfers not started (after :meth:`stop`)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
