"""Work this node forwards to other nodes: infeasible tasks and load-based moves.

A task no local resources can ever fit (the native core's ``task_infeasible`` event) is
taken out of the local queue and forwarded to an alive node whose totals fit it
(``placement.spill_order``); while none does it stays queued here, and is tried again
after each heartbeat and at once when a node joins (:meth:`Spillback.node_joined`, told
by ``node_watch.py``). Several times a second, queued work that
waits here for busy resources moves to a peer where they are free (``placement.plan_moves``),
actor creations first. A task or actor creation with a scheduling strategy (``"SPREAD"``,
a node affinity) is placed where ``placement.place_strategy`` says: here, on a peer, or
nowhere (it fails). Tasks go to each peer in batches, in the background
(``forwarding.py``); a task every candidate refuses is queued here again.

A task that starts waiting for a fitting node, and a change of the ready queue that the
placement loop sees, call ``on_demand``: the heartbeat reports a demand that grew at
once (``membership.py``, ``beat_pacer.py``), so an autoscaler hears of it without
waiting for the next periodic beat.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Container, Mapping
from typing import Any, Protocol

from rayfield._private.common import scheduling
from rayfield._private.node_manager.forwarding import Forwarder
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.node_manager.placement import (
    NodeSlot,
    SpillTable,
    place_strategy,
    plan_moves,
    spill_order,
)
from rayfield._private.node_manager.task_spec import TakenTask, TaskSpec
from rayfield._private.protocol.types import NodeInfo

__all__ = ["PLACEMENT_S", "Spillback"]

logger = logging.getLogger("rayfield")

PLACEMENT_S = 0.1  # how often queued work is checked for a node with free resources


class NativeQueue(Protocol):
    """The native core's queue, as ``rayfield.store.NodeServer`` offers it."""

    def take_task(self, task_id: bytes, pin_for: int = 0) -> dict[str, Any] | None: ...
    def scheduler_snapshot(self) -> dict[str, Any]: ...
    def place_task(self, task_id: bytes, fail: str = "") -> bool: ...


class Spillback:
    """Forwards infeasible tasks and moves queued work to idle peers.

    Args:
        queue: the native core (``take_task``, ``scheduler_snapshot``).
        client_id: the agent's store client, which keeps a taken task's argument pins.
        peers: the cluster's nodes.
        forwarder: sends tasks to peers in batches.
        push_args: ``(address, spec)`` -> the arguments this node pushes there (named in
            the forward).
        on_sent: bookkeeping of a task a peer accepted.
        give_back: queues a task no peer took here again.
        stay: the ids of tasks that must not move (forwarded here already).
        node_id: this node's id (placement by strategy).
        keep: records a task placed here by a strategy (it must not move).
        on_demand: called (on the caller's thread; it must be cheap) when the demand
            this node reports may have grown: a task started waiting for a fitting
            node, or the ready queue changed.
    """

    def __init__(
        self,
        queue: NativeQueue,
        client_id: int,
        peers: PeerView,
        forwarder: Forwarder,
        push_args: Callable[[str, TaskSpec], list[bytes]],
        on_sent: Callable[[TakenTask, NodeInfo], None],
        give_back: Callable[[TakenTask], None],
        stay: Callable[[], Container[bytes]],
        node_id: bytes = b"",
        keep: Callable[[bytes], object] = lambda task_id: None,
        on_demand: Callable[[], object] = lambda: None,
    ) -> None:
        self.queue = queue
        self.client_id = client_id
        self.peers = peers
        self.forwarder = forwarder
        self.push_args = push_args
        self.on_sent = on_sent
        self.give_back = give_back
        self.stay = stay
        self.node_id = node_id
        self.keep = keep
        self.on_demand = on_demand
        self._ready_seen: list[Any] = []  # the ready queue's shapes the loop saw last
        self.last_spread = b""  # the node the last SPREAD task went to
        self.table = SpillTable()
        # demand -> (the peers' view version, spill_order then)
        self._orders: dict[tuple[tuple[str, float], ...], tuple[int, list[NodeInfo]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rayfield-place")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def demands(self, snapshot: Mapping[str, Any] | None = None) -> list[dict[str, float]]:
        """The demand of each task no node fits (the heartbeat reports it).

        Tasks the native core no longer holds as infeasible (cancelled, alone or with
        their job when its driver exited) are dropped first, so the demand ends with them.

        Args:
            snapshot: the native core's scheduler snapshot the caller took already (the
                heartbeat's); None: one is taken here.
        """
        snap = snapshot if snapshot is not None else self.queue.scheduler_snapshot()
        held = {task_id for task_id, _, _ in snap["infeasible"]}
        with self._lock:
            self.table.keep_only(held, time.monotonic())
            return self.table.demands()

    def retry(self) -> None:
        """Try every waiting task again (after a heartbeat)."""
        with self._lock:
            waiting = self.table.to_retry()
        for task_id, demand in waiting:
            self.spill(task_id, demand)

    def node_joined(self, node: NodeInfo) -> None:
        """``node`` joined the cluster: forward to it at once the tasks waiting for a node
        that fits them, and move there the work queued for busy resources here."""
        logger.debug("node %s joined: trying waiting work", node.address)
        self.retry()
        self.place_by_load()

    def _order(self, demand: Mapping[str, float]) -> list[NodeInfo]:
        """``spill_order`` over the alive peers, kept for each demand until the view of
        the peers changes (a burst of tasks of one shape sorts the peers once)."""
        key, version = tuple(demand.items()), self.peers.version
        cached = self._orders.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        order = spill_order(demand, self.peers.alive_peers())
        if len(self._orders) >= 256:
            self._orders.clear()
        self._orders[key] = (version, order)
        return order

    def _take(self, task_id: bytes) -> TakenTask | None:
        taken = self.queue.take_task(task_id, self.client_id)
        return None if taken is None else TakenTask.from_native(taken)

    # ---- infeasible tasks -----------------------------------------------------------

    def spill(self, task_id: bytes, demand: Mapping[str, float]) -> bool:
        """Forward a task the local node cannot place to a node that can, if any.

        Returns:
            True when it is on its way (or waits out a refusal here); False when no
            alive node fits it: it stays queued here and is tried again after each
            heartbeat.
        """
        candidates = self._order(demand)
        with self._lock:
            retry_later = self.table.retry_later(task_id, time.monotonic())
            new = task_id not in self.table.infeasible
            if not candidates or retry_later:
                self.table.waiting(task_id, demand)
        if not candidates or retry_later:
            if new:
                self.on_demand()
            return retry_later
        taken = self._take(task_id)
        with self._lock:
            self.table.taken(task_id)
        if taken is None:  # an actor (they stay where submitted), or no longer queued
            return False
        self._spill_to(taken, candidates)
        return True

    def _spill_to(self, taken: TakenTask, candidates: list[NodeInfo]) -> None:
        """Forward ``taken`` to the first of ``candidates`` that takes it, in the
        background; if none does, it is queued here again and tried again later."""
        peer, rest = candidates[0], candidates[1:]
        task_id = taken.spec.task_id

        def done(why: str | None) -> None:
            if why is None:
                with self._lock:
                    self.table.accepted(task_id)
                self.on_sent(taken, peer)
                return
            logger.warning("node %s refused a task: %s", peer.address, why)
            if rest:
                self._spill_to(taken, rest)
                return
            with self._lock:  # it stays queued (infeasible) here; tried again later
                self.table.refused(task_id, time.monotonic())
            self.give_back(taken)

        pushed = self.push_args(peer.address, taken.spec)
        self.forwarder.submit(peer.address, taken.spec, pushed, done)

    # ---- scheduling strategies -------------------------------------------------------

    def place(self, task_id: bytes, wire: str, demand: Mapping[str, float], actor: bool) -> None:
        """Place a task the native core holds for its strategy ``wire``: queue it here,
        forward it, or fail it (``placement.place_strategy``)."""
        snap = self.queue.scheduler_snapshot()
        here = NodeSlot(self.node_id, dict(snap["total"]), dict(snap["available"]))
        alive = self.peers.alive_by_address()
        free = {address: n.resources_available for address, n in alive.items()}
        with self._lock:
            loads = {p.address: p.available for p in self.table.loads(free, time.monotonic())}
            peers = [
                NodeSlot(n.node_id, n.resources_total, loads.get(a, {}), a)
                for a, n in alive.items()
            ]
            decided = place_strategy(scheduling.decode(wire), demand, here, peers, self.last_spread)
            if decided.node is not None and wire == "SPREAD":
                self.last_spread = decided.node.node_id
        if decided.action == "fail":
            self.queue.place_task(task_id, fail=scheduling.unschedulable(decided.message, actor))
            return
        if decided.action == "here" or decided.node is None:
            if decided.node is not None and wire != "SPREAD":
                self.keep(task_id)  # placed here by its affinity: load never moves it
            self.queue.place_task(task_id)
            return
        taken = self._take(task_id)
        if taken is None:  # no longer held (cancelled meanwhile)
            return
        sent = (time.monotonic(), decided.node.address, dict(taken.spec.resources))
        with self._lock:  # counts against the peer's free resources while on its way
            self.table.record_sent(sent)
        self._spill_to(taken, [alive[decided.node.address]])

    # ---- load-based moves -----------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(PLACEMENT_S):
            try:
                self.place_by_load()
            except Exception:
                logger.exception("load-based placement failed")

    def place_by_load(self) -> int:
        """Move work queued here for busy resources to peers where they are free;
        returns how many tasks are on their way (a peer that refuses one gives it back
        to this node's queue)."""
        snap = self.queue.scheduler_snapshot()
        shapes = snap.get("ready_by_shape") or []
        if shapes != self._ready_seen:
            self._ready_seen = shapes
            if shapes:
                self.on_demand()
        ready = snap.get("ready_tasks") or []
        if not ready:
            return 0
        alive = self.peers.alive_by_address()
        free = {address: n.resources_available for address, n in alive.items()}
        with self._lock:
            loads = self.table.loads(free, time.monotonic())
        moved = 0
        for task_id, address in plan_moves(ready, dict(snap["available"]), loads, self.stay()):
            taken = self._take(task_id)
            if taken is None:  # started here meanwhile
                continue
            sent = (time.monotonic(), address, dict(taken.spec.resources))
            with self._lock:  # counts against the peer's free resources while on its way
                self.table.record_sent(sent)
            pushed = self.push_args(address, taken.spec)
            done = functools.partial(self._moved, taken, alive[address], sent)
            self.forwarder.submit(address, taken.spec, pushed, done)
            moved += 1
        return moved

    def _moved(
        self,
        taken: TakenTask,
        peer: NodeInfo,
        sent: tuple[float, str, dict[str, float]],
        why: str | None,
    ) -> None:
        """Outcome of a task ``place_by_load`` sent to ``peer``."""
        if why is not None:
            logger.info("node %s refused a task: %s", peer.address, why)
            with self._lock:
                self.table.sent_refused(sent)
            self.give_back(taken)
            return
        logger.debug(
            "task %s moved to %s (resources busy here)", taken.spec.task_id.hex(), peer.address
        )
        self.on_sent(taken, peer)
