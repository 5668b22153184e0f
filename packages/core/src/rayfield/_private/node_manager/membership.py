"""A node's membership in the cluster: its heartbeat and its view of the other nodes.

Every ``heartbeat_s`` the node tells the GCS its free resources, its pending demand
(ready work by resource shape, and the tasks no node fits yet) and how long it has been
idle (:mod:`~rayfield._private.node_manager.idleness`), and reads back every
node's record. A demand that grew goes out at once in a beat of its own (the heartbeat
alone, without reading the nodes back): the parts that see the demand change call
:meth:`Membership.nudge`, and ``beat_pacer.py`` decides when that beat goes (debounced,
so a burst of submissions sends one). A node that was alive and is not any more is
reported to ``on_died`` once; ``after_round`` runs after each round (work waiting for a
fitting node, actor calls waiting for their actor's node, are tried again then), also
when the GCS did not answer: the last view of the nodes stands meanwhile. Each heartbeat
is one try (the next round is the retry), so a GCS that is down costs a round no more
than one failed call.
A GCS not reached for ``reconnect_timeout_s`` (``gcs_reach.py`` decides) is reported to
``on_gcs_gone`` once: the node shuts down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rayfield._private.common.ids import ORIGIN_BYTES, origin_of
from rayfield._private.gcs.client import GcsClient
from rayfield._private.node_manager.beat_pacer import BeatPacer, demand_key
from rayfield._private.node_manager.gcs_reach import (
    DEFAULT_GCS_RECONNECT_TIMEOUT_S,
    GcsReach,
    Reach,
)
from rayfield._private.node_manager.idleness import IdleClock, is_idle
from rayfield._private.protocol.types import NodeInfo, ResourceDemand

__all__ = ["Membership", "PeerView"]

logger = logging.getLogger("rayfield")


class PeerView:
    """The nodes of the cluster as the GCS last listed them, seen from node ``self_id``.

    Thread-safe: each read and :meth:`update` holds its lock.
    """

    def __init__(self, self_id: bytes, self_address: str = "") -> None:
        self.self_id = self_id
        self.self_address = self_address
        self._lock = threading.Lock()
        self._nodes: dict[bytes, NodeInfo] = {}
        self.version = 0  # changes with every change of the view (what was read from it is old)

    def update(self, nodes: Iterable[NodeInfo]) -> list[NodeInfo]:
        """Take ``nodes`` as the cluster's nodes; returns those that were alive and are
        not any more."""
        nodes = list(nodes)
        with self._lock:
            was_alive = {i for i, n in self._nodes.items() if n.alive}
            self._nodes = {n.node_id: n for n in nodes}
            self.version += 1
        return [n for n in nodes if n.node_id in was_alive and not n.alive]

    def joined(self, node: NodeInfo) -> bool:
        """Take ``node``, a record the GCS published as alive (``NODE_ALIVE``), into the
        view; True when it is a peer the view did not know as alive (a node that joined).
        The record of a peer known as alive is kept: its heartbeats made it newer."""
        if not node.alive or node.node_id == self.self_id:
            return False
        with self._lock:
            known = self._nodes.get(node.node_id)
            if known is not None and known.alive:
                return False
            self._nodes[node.node_id] = node
            self.version += 1
        return True

    def alive_peers(self) -> list[NodeInfo]:
        """The alive nodes other than this one."""
        with self._lock:
            return [n for n in self._nodes.values() if n.alive and n.node_id != self.self_id]

    def alive_by_address(self) -> dict[str, NodeInfo]:
        """The alive nodes other than this one, by address."""
        with self._lock:
            alive = {n.address: n for n in self._nodes.values() if n.alive}
        alive.pop(self.self_address, None)
        return alive

    def is_alive(self, address: str) -> bool:
        """Whether an alive node has ``address``."""
        with self._lock:
            return any(n.alive for n in self._nodes.values() if n.address == address)

    def get(self, node_id: bytes) -> NodeInfo | None:
        with self._lock:
            return self._nodes.get(node_id)

    def maker_of(self, object_id: bytes) -> NodeInfo | None:
        """The node whose processes made ``object_id`` (its id starts with that node's
        id prefix), alive or dead; None when no node listed has that prefix."""
        origin = origin_of(object_id)
        with self._lock:
            return next(
                (n for n in self._nodes.values() if n.node_id[:ORIGIN_BYTES] == origin), None
            )

    def home_of(self, actor_id: bytes) -> str | None:
        """The address of the alive node whose process created ``actor_id`` (None: this
        node, or that node is gone)."""
        peer = self.maker_of(actor_id)
        if peer is None or not peer.alive or peer.node_id == self.self_id:
            return None
        return peer.address


class Membership:
    """Sends the node's heartbeat and keeps ``peers`` current, on its own thread.

    Args:
        gcs: the cluster's GCS client.
        info: this node's record (registered again when the GCS lost it).
        peers: the view to update.
        snapshot: the native scheduler's snapshot (``available``, ``ready_by_shape``).
        infeasible: ``infeasible(snapshot)``: the demands no node fits yet (resource name
            -> amount, one a task), given the snapshot just taken.
        on_died: called with each node found dead.
        after_round: called after each heartbeat round.
        heartbeat_s: seconds between heartbeats (an early beat goes when the demand grew,
            see :meth:`nudge`).
        reconnect_timeout_s: seconds without reaching the GCS after which ``on_gcs_gone``
            is called (0 or less: never).
        on_gcs_gone: called once, on the heartbeat thread, with why the node gives up on
            the GCS; it must not wait for :meth:`stop` (None: only logged).
    """

    def __init__(
        self,
        gcs: GcsClient,
        info: NodeInfo,
        peers: PeerView,
        snapshot: Callable[[], Mapping[str, Any]],
        infeasible: Callable[[Mapping[str, Any]], list[dict[str, float]]],
        on_died: Callable[[NodeInfo], None],
        after_round: Callable[[], None],
        heartbeat_s: float = 0.5,
        reconnect_timeout_s: float = DEFAULT_GCS_RECONNECT_TIMEOUT_S,
        on_gcs_gone: Callable[[str], None] | None = None,
    ) -> None:
        self.gcs = gcs
        self.beats = gcs.with_limits(gcs.timeout_s, retry_deadline_s=0.0)
        self.info = info
        self.peers = peers
        self.snapshot = snapshot
        self.infeasible = infeasible
        self.on_died = on_died
        self.after_round = after_round
        self.heartbeat_s = heartbeat_s
        self.reach = GcsReach(reconnect_timeout_s, time.monotonic())
        self.on_gcs_gone = on_gcs_gone
        self.idle = IdleClock()
        self.pacer = BeatPacer(heartbeat_s, time.monotonic())
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.registered = False  # the GCS took this node's registration
        self._thread = threading.Thread(target=self._run, daemon=True, name="rayfield-heartbeat")

    def start(self) -> None:
        """Register this node, read the cluster's nodes once (so a node that joined just
        before the GCS went down still knows its peers), then beat every
        ``heartbeat_s``."""
        self.gcs.register_node(self.info)
        self.registered = True
        self.reach.observe(True, time.monotonic())
        try:
            self.peers.update(self.gcs.get_nodes())
        except Exception as exc:  # the first heartbeat round reads them again
            logger.debug("reading the cluster's nodes at start failed: %s", exc)
        self._thread.start()

    def nudge(self) -> None:
        """The node's demand may have grown: the heartbeat thread measures it and, when it
        grew over what the last beat said, sends it early (``beat_pacer.py``). Cheap, and
        safe from any thread."""
        self._wake.set()

    def _send(self) -> None:
        """Send one heartbeat: free resources, demand, idle time (raises when it fails);
        register again when the GCS asks."""
        snap = self.snapshot()
        ready = snap.get("ready_by_shape", [])
        demand = [ResourceDemand(shape=dict(shape), count=int(n)) for shape, n in ready]
        waiting = self.infeasible(snap)
        demand += [ResourceDemand(d, 1, True) for d in waiting]
        idle_s = self.idle.observe(is_idle(snap, len(waiting)))
        self.pacer.beaten(demand_key(ready, waiting), time.monotonic())
        if self.beats.heartbeat(self.info.node_id, dict(snap["available"]), demand, idle_s):
            self.beats.register_node(self.info)

    def beat(self) -> bool:
        """One heartbeat round; False when the GCS could not be reached."""
        try:
            self._send()
            nodes: list[NodeInfo] | None = self.beats.get_nodes()
        except Exception as exc:
            logger.debug("heartbeat failed: %s", exc)
            nodes = None
        try:
            for node in self.peers.update(nodes) if nodes is not None else ():
                self.on_died(node)
            self.after_round()
        except Exception:
            logger.exception("acting on the heartbeat's node list failed")
        return nodes is not None

    def _observe(self) -> None:
        """Measure the demand after a :meth:`nudge`; the pacer may bring a beat forward."""
        if self.pacer.early:  # one is due already: it will carry whatever is there then
            return
        try:
            snap = self.snapshot()
            ready = snap.get("ready_by_shape", [])
            self.pacer.observe(demand_key(ready, self.infeasible(snap)), time.monotonic())
        except Exception as exc:
            logger.debug("measuring the demand failed: %s", exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._wake.wait(self.pacer.wait_s(time.monotonic())):
                self._wake.clear()
                if not self._stop.is_set():
                    self._observe()
                continue
            if self._stop.is_set():
                return
            now = time.monotonic()
            if now < self.pacer.last_beat + self.pacer.period_s:  # an early beat
                try:
                    self._send()
                except Exception as exc:
                    logger.debug("early heartbeat failed: %s", exc)
            else:
                self.judge(self.beat(), time.monotonic())
            if self.pacer.last_beat < now:  # it failed before it was sent: the next round
                self.pacer.beaten(self.pacer.sent, now)  # (or the next growth) is the retry

    def judge(self, reached: bool, now: float) -> Reach:
        """Log what a round's outcome means (``reached``: the GCS answered, at monotonic
        ``now``) and call ``on_gcs_gone`` when the node gives up; returns the verdict."""
        verdict = self.reach.observe(reached, now)
        timeout_s = self.reach.timeout_s
        if verdict is Reach.LOST:
            logger.warning(
                "the GCS at %s does not answer; the node works on, %s",
                self.gcs.address,
                f"and stops after {timeout_s:g} s without it"
                if timeout_s < float("inf")
                else "however long it takes (gcs_reconnect_timeout_s=0)",
            )
        elif verdict is Reach.BACK:
            logger.info("the GCS at %s answers again", self.gcs.address)
        elif verdict is Reach.GIVE_UP:
            why = (
                f"the GCS at {self.gcs.address} has not answered for "
                f"{self.reach.unreachable_s(now):.1f} s (gcs_reconnect_timeout_s="
                f"{timeout_s:g})"
            )
            logger.error("%s: shutting this node down with its workers and actors", why)
            if self.on_gcs_gone is not None:
                self.on_gcs_gone(why)
        return verdict

    def stop(self) -> None:
        """Stop the heartbeat."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def leave(self, timeout_s: float = 2.0) -> None:
        """Tell the GCS this node leaves the cluster: one try of ``timeout_s`` at most (a
        node the GCS does not hear from is declared dead after its heartbeat timeout).
        A node that never registered has nothing to say."""
        if not self.registered:
            return
        try:
            self.beats.with_limits(timeout_s, 0.0).unregister_node(self.info.node_id)
        except Exception as exc:
            logger.debug("unregister failed: %s", exc)
