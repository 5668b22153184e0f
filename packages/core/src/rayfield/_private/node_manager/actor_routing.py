"""Calls of actors that live on other nodes: where each actor is, and its held calls.

A call submitted here for an actor another node hosts (the native core's
``actor_task_elsewhere`` event) is taken out of the local queue and held in
:class:`ActorTable` until the actor's node is known, then forwarded there in order, in
batches, by :class:`ActorRouter`. A call the node refuses stays held, with those after
it, and is tried again after the next heartbeat. Calls of an actor that is dead for good
fail with ``ACTOR_DIED``.

Sending never holds the caller (the node's event thread): one send at a time an actor
runs on a sender thread (``sender``), and it takes every call held when it starts, so
calls that arrive while a batch is on the wire go together in the next one. One send
in flight an actor also keeps the calls in order when several threads route at once.

An actor's node is, in order: where this node sent its creation, the GCS actor table,
or (never moved) its home, the node whose process created it. Once known it is kept
until that node dies, so calls of an actor whose node is known never touch the GCS. The
GCS is asked off the caller's thread (``background``), once at a time an actor: a GCS
that is slow or down holds up only the calls of the actors it is asked about, never the
node's event thread. Records of moved actors go through the node's
:class:`~.gcs_writer.GcsWriter`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rayfield._private.common.ids import short
from rayfield._private.gcs.client import GcsClient
from rayfield._private.node_manager.forwarding import batches
from rayfield._private.node_manager.gcs_writer import GcsWriter
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.node_manager.task_spec import TakenTask, TaskSpec
from rayfield._private.protocol.types import ActorInfo, ActorState, NodeInfo

__all__ = ["ActorRouter", "ActorTable"]

logger = logging.getLogger("rayfield")

# A send of an actor's calls while its node still runs at least GATHER_CALLS of the calls
# sent before waits (up to GATHER_MAX_S) until GATHER_CALLS calls are held or fewer than
# that are left to run there (``ActorRouter._gather``).
GATHER_CALLS = 64
GATHER_MAX_S = 0.005
# A count of calls in flight that changed neither by a send nor by a result for this long
# is stale (their results are not asked for here): it starts again from zero.
OUTSTANDING_TTL_S = 0.05


def _spec_of(call: TakenTask) -> TaskSpec:
    return call.spec


class ActorTable:
    """Where actors hosted elsewhere live, and the calls held for them, in order.

    No I/O and no lock (:class:`ActorRouter` holds its lock around each call).
    """

    def __init__(self) -> None:
        self.locations: dict[bytes, str] = {}  # actor id -> address of its node
        self.calls: dict[bytes, list[TakenTask]] = {}  # actor id -> held calls, in order
        self.sending: set[bytes] = set()  # actors whose calls a sender thread sends now

    def hold(self, actor_id: bytes, call: TakenTask) -> None:
        """Hold ``call`` until it can be sent (after those held already)."""
        self.calls.setdefault(actor_id, []).append(call)

    def take(self, actor_id: bytes) -> list[TakenTask]:
        """The held calls of ``actor_id``, in order; none are held after."""
        return self.calls.pop(actor_id, [])

    def put_back(self, actor_id: bytes, unsent: list[TakenTask]) -> None:
        """Hold ``unsent`` again, before the calls held since they were taken."""
        if unsent:
            self.calls[actor_id] = unsent + self.calls.get(actor_id, [])

    def start_sending(self, actor_id: bytes) -> bool:
        """Whether a send of ``actor_id``'s held calls should start now: some are held
        and none is in flight (it is in flight from now until :meth:`done_sending`)."""
        if actor_id in self.sending or not self.calls.get(actor_id):
            return False
        self.sending.add(actor_id)
        return True

    def done_sending(self, actor_id: bytes) -> None:
        """The send of ``actor_id``'s calls ended (nothing held, or a refusal)."""
        self.sending.discard(actor_id)

    def waiting(self) -> list[bytes]:
        """The actors with calls held."""
        return [a for a, calls in self.calls.items() if calls]

    def located(self, actor_id: bytes, address: str) -> None:
        self.locations[actor_id] = address

    def location(self, actor_id: bytes) -> str | None:
        return self.locations.get(actor_id)

    def node_died(self, address: str) -> None:
        """The node at ``address`` died: its actors' locations are unknown again."""
        for aid in [a for a, addr in self.locations.items() if addr == address]:
            del self.locations[aid]


class ActorRouter:
    """Sends held actor calls to the actor's node; see the module docstring.

    Args:
        node_id: this node's id.
        gcs: the cluster's GCS client (actor table).
        writer: records actors this node moved in the GCS.
        peers: the cluster's nodes.
        dead: why an actor is dead for good, or None (``Recovery.actor_dead``).
        fail: stores error objects ``(ids, tag, message)`` (``Recovery.fail``).
        send: forwards calls in order to a node in one call; one outcome a call, None
            when taken (``NodeAgent.send_batch``).
        sent: bookkeeping of calls a node took, a batch at a time, in order (where their
            results are made).
        drop: releases what the native core handed over with a call that is not sent.
        background: runs ``fn(*args)`` off the caller's thread (GCS lookups); None: a
            pool of the router's own, shut down by :meth:`close`.
        sender: runs ``fn(*args)`` off the caller's thread (the sends of held calls);
            None: a pool of the router's own, shut down by :meth:`close`.
    """

    def __init__(
        self,
        node_id: bytes,
        gcs: GcsClient,
        writer: GcsWriter,
        peers: PeerView,
        dead: Callable[[bytes], str | None],
        fail: Callable[[list[bytes], str, str], None],
        send: Callable[[str, list[TakenTask]], list[str | None]],
        sent: Callable[[list[TakenTask], str], None],
        drop: Callable[[TakenTask], None],
        background: Callable[..., object] | None = None,
        sender: Callable[..., object] | None = None,
    ) -> None:
        self.node_id = node_id
        self.gcs = gcs
        self.writer = writer
        self.peers = peers
        self.dead = dead
        self.fail = fail
        self.send = send
        self.sent = sent
        self.drop = drop
        self.table = ActorTable()
        self._lock = threading.Lock()
        self._looking: set[bytes] = set()  # actors whose node the GCS is being asked for
        # Calls sent whose results are not back yet, per actor, and when that count last
        # changed (``_gather``). Results never asked for here (calls whose results the
        # caller drops) never come back: a count unchanged for ``OUTSTANDING_TTL_S`` is
        # stale and starts again from zero.
        self.outstanding: dict[bytes, int] = {}
        self._touched: dict[bytes, float] = {}
        self._grown = threading.Condition(self._lock)
        self._pool: ThreadPoolExecutor | None = None
        if background is None:
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rayfield-actors")
            background = self._pool.submit
        self._background = background
        self._send_pool: ThreadPoolExecutor | None = None
        if sender is None:
            self._send_pool = ThreadPoolExecutor(
                max_workers=4, thread_name_prefix="rayfield-actor-send"
            )
            sender = self._send_pool.submit
        self._sender = sender

    def call_elsewhere(self, actor_id: bytes, call: TakenTask) -> None:
        """Hold ``call`` (taken from the local queue) and send what can be sent now. While
        a send of the actor's calls is in flight, holding is all: that send takes it."""
        with self._lock:
            self.table.hold(actor_id, call)
            if actor_id in self.table.sending:
                if len(self.table.calls[actor_id]) == GATHER_CALLS:
                    self._grown.notify_all()  # a batch is full: the gathering send goes
                return
        self.route(actor_id)

    def moved(self, actor_id: bytes, peer: NodeInfo) -> None:
        """The creation of ``actor_id`` was taken by ``peer``: record its new node here
        and (in the background) in the GCS, and send its held calls there."""
        with self._lock:
            self.table.located(actor_id, peer.address)
        info = ActorInfo(
            actor_id=actor_id,
            owner_node_id=self.node_id,
            node_id=peer.node_id,
            state=ActorState.ALIVE,
        )
        self.writer.write(
            f"record actor {short(actor_id)} moved", lambda gcs: gcs.register_actor(info)
        )
        self.route(actor_id)

    def node_died(self, address: str) -> None:
        with self._lock:
            for actor_id in [a for a, where in self.table.locations.items() if where == address]:
                self.outstanding.pop(actor_id, None)
                self._touched.pop(actor_id, None)
            self.table.node_died(address)

    def retry_waiting(self) -> None:
        """Send the held calls of every actor (after a heartbeat)."""
        with self._lock:
            waiting = self.table.waiting()
        for actor_id in waiting:
            self.route(actor_id)

    def address_of(self, actor_id: bytes) -> str | None:
        """The address of the alive node hosting ``actor_id``; None when it is this node,
        or not known (yet). Asks the GCS when it is not known here: it may wait for the
        GCS, so only background threads call it."""
        with self._lock:
            address = self.table.location(actor_id)
        if address is not None:
            return address
        try:
            info = self.gcs.get_actor(actor_id)
        except Exception as exc:
            logger.debug("actor lookup failed: %s", exc)
            return None
        if info is not None and (not info.node_id or info.node_id == self.node_id):
            return None
        # Never moved (no GCS record): it lives on the node whose process created it.
        peer = self.peers.get(info.node_id) if info is not None else self.peers.maker_of(actor_id)
        if peer is None or not peer.alive or peer.node_id == self.node_id:
            return None
        with self._lock:
            self.table.located(actor_id, peer.address)
        return peer.address

    def _look_up(self, actor_id: bytes) -> None:
        """Find the node of ``actor_id`` (``address_of``), then send its held calls."""
        try:
            found = self.address_of(actor_id) is not None
        finally:
            with self._lock:
                self._looking.discard(actor_id)
        if found:
            self.route(actor_id)

    def route(self, actor_id: bytes) -> None:
        """Forward the held calls of ``actor_id`` to its node, in order, on a sender
        thread (returns at once); what cannot be sent now stays held. Calls of an actor
        dead for good fail. An actor whose node is not known here is looked up in the
        background; its calls go when it is found."""
        dead = self.dead(actor_id)
        with self._lock:
            address = None if dead else self.table.location(actor_id)
            look_up = address is None and not dead and actor_id not in self._looking
            if look_up:
                self._looking.add(actor_id)
        if look_up:
            try:
                self._background(self._look_up, actor_id)
            except RuntimeError:  # shutting down
                with self._lock:
                    self._looking.discard(actor_id)
        if address is None and not dead:
            return  # not known yet
        with self._lock:
            if not self.table.start_sending(actor_id):
                return  # nothing held, or the send in flight takes them after its batch
        try:
            self._sender(self._drain, actor_id)
        except RuntimeError:  # shutting down: they stay held
            with self._lock:
                self.table.done_sending(actor_id)

    def _drain(self, actor_id: bytes) -> None:
        """Send the held calls of ``actor_id`` until none is held (on a sender thread,
        the only send in flight for this actor); a refusal holds the rest again."""
        try:
            self._gather(actor_id)
            while self._send_held(actor_id):
                self._gather(actor_id)
        except Exception:
            logger.exception("sending the calls of actor %s failed", short(actor_id))
            with self._lock:
                self.table.done_sending(actor_id)

    def _gather(self, actor_id: bytes) -> None:
        """Let the next batch of ``actor_id``'s calls grow while the actor's node has work
        enough (as Nagle's algorithm holds small segments while data is unacknowledged):
        while at least ``GATHER_CALLS`` calls sent before have no result back and fewer
        than ``GATHER_CALLS`` are held, wait, up to ``GATHER_MAX_S``. A batch costs each
        node about as much as tens of calls in it. A call to an actor with nothing in
        flight goes at once."""
        deadline = time.monotonic() + GATHER_MAX_S
        with self._lock:
            while (
                self._in_flight(actor_id) >= GATHER_CALLS
                and 0 < len(self.table.calls.get(actor_id, ())) < GATHER_CALLS
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._grown.wait(left)

    def _in_flight(self, actor_id: bytes) -> int:
        """The calls of ``actor_id`` sent and not back (0 once the count is stale); under
        the lock."""
        touched = self._touched.get(actor_id)
        if touched is None:
            return 0
        if time.monotonic() - touched > OUTSTANDING_TTL_S:
            self.outstanding.pop(actor_id, None)
            del self._touched[actor_id]
            return 0
        return self.outstanding.get(actor_id, 0)

    def results_back(self, actor_ids: list[bytes]) -> None:
        """A result of a call of each of ``actor_ids`` (one a call) came back here."""
        with self._lock:
            now = time.monotonic()
            for actor_id in actor_ids:
                n = self.outstanding.get(actor_id, 0) - 1
                if n > 0:
                    self.outstanding[actor_id] = n
                    self._touched[actor_id] = now
                else:
                    self.outstanding.pop(actor_id, None)
                    self._touched.pop(actor_id, None)
            self._grown.notify_all()

    def _send_held(self, actor_id: bytes) -> bool:
        """One round of :meth:`_drain`: True when it sent every call it took (there may
        be more held since)."""
        dead = self.dead(actor_id)
        with self._lock:
            address = None if dead else self.table.location(actor_id)
            calls = [] if address is None and not dead else self.table.take(actor_id)
            if not calls:
                self.table.done_sending(actor_id)
                return False
        if dead:
            for call in calls:
                self.fail(list(call.spec.return_ids), "ACTOR_DIED", dead)
                self.drop(call)
            return True
        assert address is not None
        done = 0
        for chunk in batches(calls, _spec_of):
            try:
                outcomes = self.send(address, chunk)
            except Exception as exc:  # a refusal of the whole chunk: the calls stay held
                outcomes = [f"{type(exc).__name__}: {exc}"] * len(chunk)
            if len(outcomes) != len(chunk):
                outcomes = [f"{len(outcomes)} replies to {len(chunk)} actor calls"] * len(chunk)
            taken = 0
            for why in outcomes:
                if why is not None:
                    break
                taken += 1
            self.sent(chunk[:taken], address)
            if taken:
                with self._lock:
                    self.outstanding[actor_id] = self._in_flight(actor_id) + taken
                    self._touched[actor_id] = time.monotonic()
            done += taken
            if taken < len(chunk):
                why = outcomes[taken]
                logger.warning("could not forward an actor call to %s: %s", address, why)
                with self._lock:
                    self.table.put_back(actor_id, calls[done:])
                    self.table.done_sending(actor_id)
                return False
        return True

    def close(self) -> None:
        """Drop the lookups not started (the node is stopping)."""
        for pool in (self._pool, self._send_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
