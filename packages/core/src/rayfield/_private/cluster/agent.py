"""The cluster side of a node: GCS membership, spillback and object transfer.

A node started by ``rayfield start`` hosts a ``LocalNode`` (native core and workers) and
this ``NodeAgent``, which

* registers the node with the GCS and sends a heartbeat every ``heartbeat_s`` with the
  free resources and the pending demand (queued and infeasible work by resource shape),
  and keeps the cluster view the GCS answers;
* forwards (spills back) work the local node cannot place to an alive node whose totals
  fit it (``task_infeasible`` events); work nobody can place waits, and is placed when a
  fitting node joins; work that waits here for busy resources moves to a node where they
  are free (``placement.py``), actor creations first; tasks go to each peer in batches,
  in the background (``forwarding.py``), each task's outcome handled on its own;
* fetches objects a local client waits for but the node lacks (``object_missing``
  events): from the node a task was forwarded to, by a long poll whose reply carries
  the small ones whole, else from the GCS object directory, else by asking every alive
  node; larger objects are pulled in chunks over gRPC and written straight into the
  local store (``transfer.py``). Arguments of tasks this node forwards are pushed to
  the node they go to as soon as they are sealed (``object_push.py``); results of
  forwarded tasks are not pushed (see ``accept_forwarded``);
* serves ``/rayfield.Node`` (``node_service.py``) to the other nodes, and to the CLI
  and dashboard for introspection (``introspect.py``);
* sends the node's task events to the GCS (``event_shipper.py``).
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc

from rayfield._private.cluster.code_exports import fetch_into, is_code
from rayfield._private.cluster.event_shipper import EventShipper
from rayfield._private.cluster.forwarding import SEND_ATTEMPTS, AcceptedTasks, Forwarder, batches
from rayfield._private.cluster.introspect import Introspector
from rayfield._private.cluster.lifecycle import Lifecycle
from rayfield._private.cluster.node_service import STREAMING_METHODS, NodeService, NodeStub
from rayfield._private.cluster.object_push import INLINE_MAX_BYTES, ObjectPusher
from rayfield._private.cluster.placement import PeerLoad, fits, plan_moves
from rayfield._private.cluster.recovery import Recovery
from rayfield._private.cluster.transfer import keep_freed_memory, store_whole, write_chunks
from rayfield._private.gcs.client import GcsClient
from rayfield._private.protocol.types import ActorInfo, ActorState, NodeInfo, ResourceDemand
from rayfield._private.runtime import ORIGIN_BYTES, origin_of
from rayfield._private.transport import TlsConfig, TokenInterceptor, auth_metadata, open_channel
from rayfield.store import StoreClient

if TYPE_CHECKING:
    from rayfield._private.node import LocalNode

logger = logging.getLogger("rayfield")

MAX_MESSAGE_BYTES = 64 << 20
FIRST_LOOKUP_S = 0.1  # most objects a client waits for are being made here
MAX_BACKOFF_S = 2.0
# How long a holder waits for an object still being made before answering "not here":
# short, so waiting pulls never tie up the transfer threads of either node; the puller
# asks again with a growing delay (FIRST_LOOKUP_S doubling to MAX_BACKOFF_S).
PULL_WAIT_MS = 200
POLL_WAIT_MS = 1000  # how long one HasObjects long poll waits for a result being made
# An object another node pushes here (a forwarded task's result, an argument it named) is
# asked for only if no push came within this long.
PUSH_FALLBACK_S = 1.0
PLACEMENT_S = 0.1  # how often queued work is checked for a node with free resources
SENT_MEMORY_S = 1.5  # what was sent to a peer counts against its free resources this long
RETRIED_CODES = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
MAX_ENDED_JOBS = 1000  # jobs whose driver exited, remembered: their tasks are refused


class NodeAgent:
    """Joins ``node`` to the cluster whose GCS is ``gcs``; see the module docstring.

    Args:
        node: the local node (its native server and worker pool).
        gcs: client of the cluster's GCS.
        token: the cluster token, required by every peer and by this node's service.
        host: address this node's gRPC service listens on (and is reached at).
        port: its TCP port; 0 picks a free one.
        tls: mutual TLS for the service and for channels to peers (None: plaintext).

    Raises:
        RuntimeError: when the port cannot be bound.
    """

    def __init__(
        self,
        node: LocalNode,
        gcs: GcsClient,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsConfig | None = None,
        heartbeat_s: float = 0.5,
    ) -> None:
        keep_freed_memory()
        self.node = node
        self.gcs = gcs
        self.tls = tls
        self.heartbeat_s = heartbeat_s
        self.node_id = node.server.node_id
        self.metadata = auth_metadata(token)
        self.client = StoreClient(node.socket_path, kind="driver")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._channels: dict[str, tuple[grpc.Channel, NodeStub]] = {}
        self.peers: dict[bytes, NodeInfo] = {}
        self.infeasible: dict[bytes, dict[str, float]] = {}  # task id -> demand
        self.not_before: dict[bytes, float] = {}  # task id -> when to try forwarding again
        self.forwarded: dict[bytes, str] = {}  # return id -> address of the node making it
        self.held: set[bytes] = set()  # returns made here for other nodes' tasks
        self.actor_locations: dict[bytes, str] = {}  # actor id -> address of its node
        self.pending_calls: dict[bytes, list[dict[str, Any]]] = {}  # actor id -> call specs
        self.wanted: dict[bytes, tuple[float, float]] = {}  # id -> (next try, backoff)
        self.inflight: set[bytes] = set()
        self._backoff: dict[bytes, float] = {}  # id -> last delay, while a fetch runs
        self._polling: set[str] = set()  # addresses with a long poll running
        self._lost_strikes: dict[bytes, int] = {}  # id -> rounds found nowhere, owner dead
        self._wake = threading.Event()  # something is wanted now: the fetch loop runs at once
        self.accepted = AcceptedTasks()  # tasks forwarded here: never again, never moved
        self.ended_jobs: dict[bytes, None] = {}  # jobs whose driver exited (oldest first)
        # Arguments of tasks sent elsewhere, pinned here until their results are back:
        self._arg_pins: dict[bytes, tuple[str, list[bytes], set[bytes]]] = {}  # task id ->
        self._pins_by_return: dict[bytes, bytes] = {}  # (address, pins, returns to come)
        self._sent_load: list[tuple[float, str, dict[str, float]]] = []  # (when, to, demand)
        self._announced: set[bytes] = set()  # large objects a peer said it holds for us
        self._code_from_peers: set[bytes] = set()  # code ids the GCS did not have
        self.pusher = ObjectPusher(node.socket_path, self._send_push, self._pushed)
        self.lifecycle = Lifecycle(self)  # final actor deaths, fate-sharing, remote cancel
        self.forwarder = Forwarder(self._send_batch)
        self.recovery = Recovery(self.client, self._resubmit, self.lifecycle.actor_died)
        # Sent in batches by the fetch thread, off the event and transfer threads:
        self._new_locations: dict[bytes, list[bytes]] = {}  # node id -> ids to record
        self._to_release: dict[str, list[bytes]] = {}  # address -> ids it may drop
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="rayfield-transfer")
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=16, thread_name_prefix="rayfield-node-rpc"),
            interceptors=[TokenInterceptor(token, STREAMING_METHODS)],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self.server.add_generic_rpc_handlers((NodeService(self).handler(),))
        bind = f"{host}:{port}"
        if tls is not None:
            bound = self.server.add_secure_port(bind, tls.server_credentials())
        else:
            bound = self.server.add_insecure_port(bind)
        if bound == 0:
            raise RuntimeError(f"cannot listen on {bind}: is the port in use?")
        self.address = f"{host}:{bound}"
        self.introspector = Introspector(node, self.address)
        self.server.start()
        self.info = NodeInfo(
            node_id=self.node_id,
            address=self.address,
            socket_path=node.socket_path,
            session_dir=str(node.session_dir),
            hostname=socket.gethostname(),
            resources_total=dict(node.resources),
            resources_available=dict(node.resources),
        )
        self.gcs.register_node(self.info)
        self._threads = [
            threading.Thread(target=self._heartbeat_loop, daemon=True, name="rayfield-heartbeat"),
            threading.Thread(target=self._want_loop, daemon=True, name="rayfield-fetch"),
            threading.Thread(target=self._placement_loop, daemon=True, name="rayfield-place"),
        ]
        for t in self._threads:
            t.start()
        self.events = EventShipper(node.session_dir / "logs", gcs, self.address, self.node_id)
        self.events.start()

    # ---- peers ---------------------------------------------------------------------

    def _stub(self, address: str) -> NodeStub:
        with self._lock:
            entry = self._channels.get(address)
            if entry is None:
                channel = open_channel(address, self.tls, MAX_MESSAGE_BYTES)
                entry = (channel, NodeStub(channel, self.metadata))
                self._channels[address] = entry
        return entry[1]

    def _pushed_args(self, address: str, spec: dict[str, Any]) -> list[bytes]:
        """The arguments of a task going to ``address`` that this node pushes there once
        sealed: those held here or made by this node's processes (they will be sealed
        here). The forward names them, so the receiver does not ask for them."""
        mine = self.node_id[:ORIGIN_BYTES]
        pushed = [
            dep
            for dep in spec.get("dependencies", [])
            if origin_of(dep) == mine or self.client.contains(dep)
        ]
        for dep in pushed:
            self.pusher.push_when_sealed(dep, address)
        return pushed

    def _send_batch(
        self,
        address: str,
        tasks: Sequence[tuple[dict[str, Any], list[bytes]]],
        in_order: bool = False,
    ) -> list[str | None]:
        """Forward ``tasks`` (``(spec, pushed)`` each) to the node at ``address`` in one
        call; one outcome a task: None when it took it, else why not. A call that timed
        out or did not reach the peer is made again (the peer answers the tasks it took
        in an earlier try as accepted, without queueing them twice), up to
        ``SEND_ATTEMPTS`` times while the peer is alive."""
        why = ""
        for attempt in range(SEND_ATTEMPTS):
            try:
                return self._stub(address).forward_batch(self.address, tasks, in_order)
            except grpc.RpcError as exc:
                why = f"{exc.code().name}: {exc.details()}"
                if exc.code() not in RETRIED_CODES or not self._peer_alive(address):
                    break
                logger.info("forwarding to %s failed (%s); try %d again", address, why, attempt + 2)
                time.sleep(min(1.0, 0.1 * 2**attempt))
        return [why] * len(tasks)

    def _peer_alive(self, address: str) -> bool:
        with self._lock:
            return any(n.alive for n in self.peers.values() if n.address == address)

    def alive_peers(self) -> list[NodeInfo]:
        with self._lock:
            return [n for n in self.peers.values() if n.alive and n.node_id != self.node_id]

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                snap = self.node.server.scheduler_snapshot()
                demand = [
                    ResourceDemand(shape=dict(shape), count=int(n))
                    for shape, n in snap.get("ready_by_shape", [])
                ]
                with self._lock:
                    demand += [ResourceDemand(d, 1, True) for d in self.infeasible.values()]
                if self.gcs.heartbeat(self.node_id, dict(snap["available"]), demand):
                    self.gcs.register_node(self.info)
                nodes = self.gcs.get_nodes()
            except Exception as exc:
                logger.debug("heartbeat failed: %s", exc)
                continue
            with self._lock:
                was_alive = {i for i, n in self.peers.items() if n.alive}
                self.peers = {n.node_id: n for n in nodes}
                died = [n for n in nodes if n.node_id in was_alive and not n.alive]
                retry = list(self.infeasible.items())
            for node in died:
                self._node_died(node)
            for task_id, shape in retry:
                self.spill(task_id, shape)
            with self._lock:
                waiting_actors = [a for a, calls in self.pending_calls.items() if calls]
            for actor_id in waiting_actors:
                self.route_calls(actor_id)

    # ---- spillback -----------------------------------------------------------------

    def spill(self, task_id: bytes, demand: dict[str, float]) -> bool:
        """Forward a task the local node cannot place to a node that can, if any.

        Returns:
            False when no alive node fits the task: it stays queued here and is tried
            again after each heartbeat (a fitting node may join).
        """
        candidates = [n for n in self.alive_peers() if fits(demand, n.resources_total)]
        with self._lock:
            retry_later = self.not_before.get(task_id, 0.0) > time.monotonic()
        if not candidates or retry_later:
            with self._lock:
                self.infeasible[task_id] = demand
            return retry_later
        spec = self.node.server.take_task(task_id, self.client.client_id)
        with self._lock:
            self.infeasible.pop(task_id, None)
        if spec is None:  # an actor (they stay where submitted), or no longer queued
            return False
        candidates.sort(key=lambda n: -sum(n.resources_available.get(k, 0.0) for k in demand))
        self._spill_to(spec, candidates)
        return True

    def _spill_to(self, spec: dict[str, Any], candidates: list[NodeInfo]) -> None:
        """Forward a taken task to the first of ``candidates`` that takes it, in the
        background (``forwarding.py``); if none does, it is queued here again and tried
        again in a second."""
        peer, rest = candidates[0], candidates[1:]

        def done(why: str | None) -> None:
            task_id = spec["task_id"]
            if why is None:
                with self._lock:
                    self.not_before.pop(task_id, None)
                self._sent(spec, peer)
                return
            logger.warning("node %s refused a task: %s", peer.address, why)
            if rest:
                self._spill_to(spec, rest)
                return
            with self._lock:  # it stays queued (infeasible) here; tried again in a second
                self.not_before[task_id] = time.monotonic() + 1.0
            self._give_back(spec)

        self.forwarder.submit(peer.address, spec, self._pushed_args(peer.address, spec), done)

    def _give_back(self, spec: dict[str, Any]) -> None:
        """Queue a taken task here again (no peer took it), unless its driver exited."""
        ended = self._job_ended(spec["task_id"])
        if ended is not None:
            from rayfield._private.cluster.lifecycle import job_cancelled

            self.recovery.fail(spec["return_ids"], "CANCELLED", job_cancelled(ended))
        else:
            self._resubmit(spec)  # pins its arguments again
        self._release_kept(spec.get("kept_pins"), spec.get("kept_handles"))

    def _release_kept(self, pins: list[bytes] | None, handles: list[bytes] | None) -> None:
        """Drop what ``take_task`` moved to this agent: argument pins and actor handles."""
        if pins:
            self.client.unpin(pins)
        if handles:
            for actor_id in handles:
                self.client.actor_handles([actor_id], False)

    def _sent(self, spec: dict[str, Any], peer: NodeInfo) -> None:
        """Bookkeeping of a task ``peer`` accepted: where its results are made, its spec
        for recovery, the new home of an actor."""
        with self._lock:
            for rid in spec["return_ids"]:
                self._made_at(rid, peer.address)
            self._new_locations.setdefault(peer.node_id, []).extend(spec["return_ids"])
        self.recovery.record(spec, peer.address)
        self._hold_args(spec, peer.address)
        if spec.get("actor_creation"):
            self._actor_moved(spec["actor_id"], peer)

    def _hold_args(self, spec: dict[str, Any], address: str) -> None:
        """Keep the arguments of a task sent to ``address`` pinned (``take_task`` moved the
        node's pins to this agent) until its results are back; an actor's creation
        arguments for its lifetime (a restart reads them again). The actor handles it held
        go now: the peer's node counted them before it accepted the task."""
        self._release_kept(None, spec.get("kept_handles"))
        pins = spec.get("kept_pins") or []
        if not pins or spec.get("actor_creation"):
            return
        if not spec["return_ids"]:  # nothing tells when it ran: its node pinned them on arrival
            self.client.unpin(pins)
            return
        with self._lock:
            self._arg_pins[spec["task_id"]] = (address, pins, set(spec["return_ids"]))
            for rid in spec["return_ids"]:
                self._pins_by_return[rid] = spec["task_id"]

    def _result_back(self, object_id: bytes) -> None:
        """A result of a task sent elsewhere is here (or failed): once all are, unpin its
        arguments."""
        with self._lock:
            task_id = self._pins_by_return.pop(object_id, None)
            entry = self._arg_pins.get(task_id) if task_id is not None else None
            if entry is None:
                return
            entry[2].discard(object_id)
            if entry[2]:
                return
            del self._arg_pins[task_id]  # type: ignore[arg-type]
        self.client.unpin(entry[1])

    def _drop_args_sent_to(self, address: str) -> None:
        """Unpin the arguments of every task sent to ``address`` (it died; the tasks were
        submitted again here, which pins them anew, or failed)."""
        with self._lock:
            lost = [t for t, e in self._arg_pins.items() if e[0] == address]
            entries = [self._arg_pins.pop(t) for t in lost]
            for e in entries:
                for rid in e[2]:
                    self._pins_by_return.pop(rid, None)
        for e in entries:
            self.client.unpin(e[1])

    def _placement_loop(self) -> None:
        while not self._stop.wait(PLACEMENT_S):
            try:
                self.place_by_load()
            except Exception:
                logger.exception("load-based placement failed")

    def place_by_load(self) -> int:
        """Move work queued here for busy resources to peers where they are free (see
        ``placement.py``); returns how many tasks are on their way (a peer that refuses
        one gives it back to this node's queue)."""
        snap = self.node.server.scheduler_snapshot()
        ready = snap.get("ready_tasks") or []
        if not ready:
            return 0
        now = time.monotonic()
        with self._lock:
            self._sent_load = [e for e in self._sent_load if now - e[0] < SENT_MEMORY_S]
            alive = {n.address: n for n in self.peers.values() if n.alive}
            alive.pop(self.address, None)
            loads = {a: PeerLoad(a, dict(n.resources_available)) for a, n in alive.items()}
            for _, address, demand in self._sent_load:
                if address in loads:
                    for k, v in demand.items():
                        loads[address].available[k] = loads[address].available.get(k, 0.0) - v
            stay = self.accepted.ids()
        peers = sorted(loads.values(), key=lambda p: -p.available.get("CPU", 0.0))
        moved = 0
        for task_id, address in plan_moves(ready, dict(snap["available"]), peers, stay):
            spec = self.node.server.take_task(task_id, self.client.client_id)
            if spec is None:  # started here meanwhile
                continue
            sent = (time.monotonic(), address, dict(spec["resources"]))
            with self._lock:  # counts against the peer's free resources while on its way
                self._sent_load.append(sent)
            pushed = self._pushed_args(address, spec)
            self.forwarder.submit(
                address, spec, pushed, functools.partial(self._moved, spec, alive[address], sent)
            )
            moved += 1
        return moved

    def _moved(
        self,
        spec: dict[str, Any],
        peer: NodeInfo,
        sent: tuple[float, str, dict[str, float]],
        why: str | None,
    ) -> None:
        """Outcome of a task ``place_by_load`` sent to ``peer``."""
        if why is not None:
            logger.info("node %s refused a task: %s", peer.address, why)
            with self._lock:
                if sent in self._sent_load:
                    self._sent_load.remove(sent)
            self._give_back(spec)
            return
        logger.debug(
            "task %s moved to %s (resources busy here)", spec["task_id"].hex(), peer.address
        )
        self._sent(spec, peer)

    # ---- actors on other nodes ------------------------------------------------------

    def _actor_moved(self, actor_id: bytes, peer: NodeInfo) -> None:
        with self._lock:
            self.actor_locations[actor_id] = peer.address
        try:
            info = ActorInfo(
                actor_id=actor_id,
                owner_node_id=self.node_id,
                node_id=peer.node_id,
                state=ActorState.ALIVE,
            )
            self.gcs.register_actor(info)
        except Exception as exc:
            logger.warning("could not record actor %s in the GCS: %s", actor_id.hex()[:16], exc)
        self.route_calls(actor_id)

    def on_actor_task_elsewhere(self, task_id: bytes, actor_id: bytes) -> None:
        spec = self.node.server.take_task(task_id, self.client.client_id)
        if spec is not None:
            with self._lock:
                self.pending_calls.setdefault(actor_id, []).append(spec)
            self.route_calls(actor_id)

    def _actor_address(self, actor_id: bytes) -> str | None:
        with self._lock:
            address = self.actor_locations.get(actor_id)
        if address is not None:
            return address
        try:
            info = self.gcs.get_actor(actor_id)
        except Exception as exc:
            logger.debug("actor lookup failed: %s", exc)
            return None
        if info is not None and (not info.node_id or info.node_id == self.node_id):
            return None
        with self._lock:
            if info is not None:
                peer = self.peers.get(info.node_id)
            else:  # never moved: it lives on the node whose process created it
                origin = origin_of(actor_id)
                peer = next(
                    (n for n in self.peers.values() if n.node_id[:ORIGIN_BYTES] == origin), None
                )
        if peer is None or not peer.alive or peer.node_id == self.node_id:
            return None
        with self._lock:
            self.actor_locations[actor_id] = peer.address
        return peer.address

    def home_of(self, actor_id: bytes) -> str | None:
        """The address of the alive node whose process created ``actor_id`` (None: this
        node, or that node is gone)."""
        origin = origin_of(actor_id)
        with self._lock:
            peer = next(
                (n for n in self.peers.values() if n.node_id[:ORIGIN_BYTES] == origin), None
            )
        if peer is None or not peer.alive or peer.node_id == self.node_id:
            return None
        return peer.address

    def route_calls(self, actor_id: bytes) -> None:
        """Forward the held calls of an actor that lives on another node, in order; what
        cannot be sent now is kept and tried again after the next heartbeat."""
        dead = self.recovery.actor_dead(actor_id)
        address = None if dead else self._actor_address(actor_id)
        if address is None and not dead:
            return  # not known yet
        with self._lock:
            calls = self.pending_calls.pop(actor_id, [])
        if dead:
            for spec in calls:
                self.recovery.fail(spec["return_ids"], "ACTOR_DIED", dead)
                self._release_kept(spec.get("kept_pins"), spec.get("kept_handles"))
            return
        assert address is not None
        sent = 0
        for chunk in batches(calls):
            pushed = [(spec, self._pushed_args(address, spec)) for spec in chunk]
            outcomes = self._send_batch(address, pushed, in_order=True)
            for spec, why in zip(chunk, outcomes, strict=True):
                if why is not None:
                    logger.warning("could not forward an actor call to %s: %s", address, why)
                    with self._lock:
                        rest = self.pending_calls.get(actor_id, [])
                        self.pending_calls[actor_id] = calls[sent:] + rest
                    return
                sent += 1
                self._call_sent(spec, actor_id, address)

    def _call_sent(self, spec: dict[str, Any], actor_id: bytes, address: str) -> None:
        """Bookkeeping of an actor call the actor's node at ``address`` took."""
        self.recovery.record(spec, address)
        self._hold_args(spec, address)
        logger.debug(
            "call %s of actor %s sent to %s", spec["task_id"].hex(), actor_id.hex(), address
        )
        with self._lock:
            for rid in spec["return_ids"]:
                self._made_at(rid, address)

    def _made_at(self, object_id: bytes, address: str) -> None:
        """(Lock held.) ``object_id`` will be made at ``address``: ask there, now, if wanted."""
        self.forwarded[object_id] = address
        if object_id in self.wanted:
            self.wanted[object_id] = (time.monotonic(), FIRST_LOOKUP_S)
            self._wake.set()

    def _node_died(self, node: NodeInfo) -> None:
        logger.warning(
            "node %s (%s) died: %s",
            node.node_id.hex()[:12],
            node.address,
            node.death_reason or "no heartbeat",
        )
        with self._lock:
            for rid in [r for r, a in self.forwarded.items() if a == node.address]:
                del self.forwarded[rid]
            for aid in [a for a, addr in self.actor_locations.items() if addr == node.address]:
                del self.actor_locations[aid]
            entry = self._channels.pop(node.address, None)
        if entry is not None:
            entry[0].close()
        self.pusher.forget(node.address)
        self.lifecycle.actors_restarted(self.recovery.node_died(node.address))
        self._drop_args_sent_to(node.address)
        self.lifecycle.peer_died()  # the handles it held are gone

    def _resubmit(self, spec: dict[str, Any]) -> None:
        keys = [
            "task_id",
            "payload",
            "resources",
            "dependencies",
            "actor_id",
            "actor_creation",
            "max_concurrency",
            "caller_id",
            "sequence_no",
            "return_ids",
            "max_retries",
            "pin_returns",
            "resume_sequence",
            "actor_handles",
        ]
        self.client.submit_task(**{k: spec[k] for k in keys if k in spec})

    def job_ended(self, job_id: bytes) -> None:
        """The driver of ``job_id`` exited: its tasks forwarded here from now on never run."""
        with self._lock:
            self.ended_jobs[job_id] = None
            while len(self.ended_jobs) > MAX_ENDED_JOBS:
                del self.ended_jobs[next(iter(self.ended_jobs))]

    def _job_ended(self, task_id: bytes) -> bytes | None:
        with self._lock:
            if not self.ended_jobs:
                return None
            return next((j for j in self.ended_jobs if task_id.startswith(j)), None)

    def accept_forwarded(self, origin: str, spec: dict[str, Any], pushed: list[bytes]) -> None:
        """Queue a task forwarded by the node at ``origin``; fetch its missing arguments
        (those in ``pushed`` only if ``origin`` does not push them); push its results
        to ``origin`` once they are made. A task of a job whose driver exited is not run:
        its results are ``CANCELLED`` errors."""
        ended = self._job_ended(spec["task_id"])
        if ended is not None:
            from rayfield._private.cluster.lifecycle import job_cancelled

            self.recovery.fail(spec["return_ids"], "CANCELLED", job_cancelled(ended))
            return
        with self._lock:
            if not self.accepted.take(spec["task_id"]):
                return  # a retried call: queued here by an earlier try already
            self.held.update(spec["return_ids"])
        coming = set(pushed)
        for dep in spec["dependencies"]:
            if not self.client.contains(dep):
                self.want(dep, origin, PUSH_FALLBACK_S if dep in coming else 0.0)
        # Results go back by the origin's pull (a long poll of this node), not by a push:
        # pushing them and dropping this node's hold at once leaked the resources of
        # actors restarted here (the chaos test); see docs/architecture.md.
        resume = bool(spec.get("actor_id")) and not spec.get("actor_creation")
        self._resubmit(dict(spec, pin_returns=True, resume_sequence=resume))

    def counted(self) -> None:
        """Return once the native node has read every task submitted so far (one round
        trip on the same socket): the actor handles they hold are counted, so the node
        that forwarded them may drop its own."""
        self.client.contains(bytes(20))

    def _send_push(self, address: str, object_id: bytes, size: int, meta: bytes, data: Any) -> bool:
        return self._stub(address).push(object_id, self.address, size, meta, data)

    def _pushed(self, object_id: bytes, address: str, ok: bool) -> None:
        """After a push: a result made here for ``address`` need not be held any more."""
        if ok:
            self.release_held([object_id])

    def receive_push(
        self, object_id: bytes, sender: str, size: int, meta: bytes, data: Any
    ) -> bool:
        """Store an object another node pushed. ``data`` None (a large object): pull it from
        ``sender`` now if a client here waits for it, else when one does (no delay then).
        Returns whether it is here now."""
        if data is None:
            with self._lock:
                self.forwarded.setdefault(object_id, sender)
                waited = object_id in self.wanted
                if not waited:
                    self._announced.add(object_id)
            if waited:
                self._start_fetch(object_id, [sender])
            return False
        return self._store_whole(object_id, sender, size, meta, data, release=False)

    def _store_whole(
        self, object_id: bytes, sender: str, size: int, meta: bytes, data: Any, release: bool
    ) -> bool:
        """Store an object that came whole from the node at ``sender`` (a push, a long
        poll's reply); whether it is here now (``release``: see ``_arrived``)."""
        stored = store_whole(self.client, object_id, size, meta, data)
        if stored:
            self._arrived(object_id, sender, release=release)
        return stored is not False  # None: pulled meanwhile, or made here

    def release_held(self, ids: list[bytes]) -> None:
        with self._lock:
            mine = [oid for oid in ids if oid in self.held]
            self.held.difference_update(mine)
        if mine:
            self.client.unpin(mine)

    # ---- object transfer -----------------------------------------------------------

    def on_object_missing(self, object_id: bytes, client: int) -> None:
        if client == self.client.client_id:
            return  # our own get while serving a pull
        with self._lock:
            if object_id in self.held:
                return  # made here, by a forwarded task
            hint = self.forwarded.get(object_id)
        # A forwarded task's result is asked for at once, by a long poll of the node
        # making it (results are pulled, not pushed).
        self.want(object_id, hint)

    def want(self, object_id: bytes, hint: str | None = None, delay_s: float = 0.0) -> None:
        """Fetch ``object_id`` into the local store (from ``hint`` first, if given), after
        ``delay_s`` (an object on its way here by a push is asked for only if it does not
        come)."""
        with self._lock:
            if object_id in self.inflight or object_id in self.wanted:
                return
            if object_id in self._announced:  # its holder said so already: no push to wait for
                delay_s = 0.0
            if hint is not None:  # asked by the long poll of that node
                self.forwarded.setdefault(object_id, hint)
                self.wanted[object_id] = (time.monotonic() + delay_s, FIRST_LOOKUP_S)
            else:  # maybe being made here; code is not: it is asked of the GCS at once
                delay_s = delay_s if is_code(object_id) else max(delay_s, FIRST_LOOKUP_S)
                self.wanted[object_id] = (time.monotonic() + delay_s, FIRST_LOOKUP_S)
        if delay_s <= 0:
            self._wake.set()

    def _send_batches(self) -> None:
        """Record new object locations in the GCS and release pulled objects, in batches."""
        with self._lock:
            locations, self._new_locations = self._new_locations, {}
            releases, self._to_release = self._to_release, {}
        for node_id, ids in locations.items():
            try:
                self.gcs.add_object_locations(node_id, ids)
            except Exception as exc:
                logger.debug("object directory update failed: %s", exc)
        for address, ids in releases.items():
            try:
                self._stub(address).release(ids)
            except Exception as exc:
                logger.debug("releasing %d objects on %s failed: %s", len(ids), address, exc)

    def _want_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.05)
            self._wake.clear()
            self._send_batches()
            now = time.monotonic()
            with self._lock:  # those whose maker's long poll runs wait for the next poll
                due = [
                    oid
                    for oid, (t, _) in self.wanted.items()
                    if t <= now and self.forwarded.get(oid) not in self._polling
                ]
                hinted = {oid for oid in due if oid in self.forwarded}
            # (the poll tells whether a hinted one is there: no store round trip each)
            due = [oid for oid in due if oid in hinted or not self._have(oid)]
            with self._lock:
                code = [o for o in due if is_code(o) and o not in self._code_from_peers]
            for oid in code:  # from the GCS (_fetch), then from peers
                self._start_fetch(oid, [])
            if code:
                skip = set(code)
                due = [oid for oid in due if oid not in skip]
            by_hint: dict[str, list[bytes]] = {}
            with self._lock:  # where it is being made, or where the task that needs it came from
                for oid in due:
                    hint = self.forwarded.get(oid)
                    if hint is not None:
                        by_hint.setdefault(hint, []).append(oid)
                for address, ids in list(by_hint.items()):
                    if address in self._polling:
                        continue  # its long poll is running; these wait for the next one
                    self._polling.add(address)
                    for oid in ids:
                        self.wanted.pop(oid, None)
                    self._pool.submit(self._poll, address, ids)
            due = [oid for oid in due if oid not in self.forwarded]
            if not due:
                continue
            try:
                locations = self.gcs.get_object_locations(due)
            except Exception as exc:
                logger.debug("object directory lookup failed: %s", exc)
                locations = {}
            addresses = {n.node_id: n.address for n in self.alive_peers()}
            unknown = []
            for oid in due:
                found: list[str | None] = [
                    addresses[n] for n in locations.get(oid, []) if n in addresses
                ]
                if found:
                    self._start_fetch(oid, found)
                else:
                    unknown.append(oid)
            for address in set(addresses.values()) if unknown else ():
                try:
                    present = self._stub(address).has_objects(unknown)
                except grpc.RpcError:
                    continue
                for oid, here in zip(unknown, present, strict=False):
                    if here:
                        self._start_fetch(oid, [address])
            self._check_lost(unknown)
            with self._lock:
                for oid in unknown:
                    if oid in self.wanted:
                        backoff = min(MAX_BACKOFF_S, self.wanted[oid][1] * 2)
                        self.wanted[oid] = (time.monotonic() + backoff, backoff)

    def _check_lost(self, ids: list[bytes]) -> None:
        """Fail, with a LOST error object, wanted objects that no alive node holds and
        whose owner node (the node of the process that made them) is dead: nothing can
        make them again. Two rounds of asking every node must agree first, so a copy
        being recorded or pulled elsewhere is not mistaken for a lost one."""
        with self._lock:
            owners = {n.node_id[:ORIGIN_BYTES]: n for n in self.peers.values()}
        lost = []
        for oid in ids:
            owner = owners.get(origin_of(oid))
            if owner is None or owner.alive or self.client.contains(oid):
                self._lost_strikes.pop(oid, None)  # (the common case: no lock, one dict op)
                continue
            with self._lock:
                if oid not in self.wanted or oid in self.forwarded:
                    self._lost_strikes.pop(oid, None)
                    continue
                strikes = self._lost_strikes[oid] = self._lost_strikes.get(oid, 0) + 1
                if strikes < 2:
                    continue
                del self._lost_strikes[oid]
                self.wanted.pop(oid, None)
            lost.append((oid, owner))
        for oid, owner in lost:
            logger.warning("object %s is lost: its owner node %s died", oid.hex(), owner.address)
            self.recovery.fail(
                [oid],
                "LOST",
                f"object {oid.hex()} is lost: it was made on node {owner.node_id.hex()[:12]} "
                f"({owner.address}), which died ({owner.death_reason or 'no heartbeat'}), and "
                "no alive node holds a copy. Objects made by rf.put() cannot be rebuilt; "
                "return them from a task with max_retries to have them recomputed.",
            )

    def _poll(self, address: str, ids: list[bytes]) -> None:
        """Long-poll the node at ``address`` until one of ``ids`` is there; store those that
        came whole in the reply (small ones), pull the other ones there, and want the
        rest again: at once when something came (more are likely done), else shortly
        (the poll itself did the waiting)."""
        got = False
        try:
            try:
                present, whole = self._stub(address).fetch_objects(
                    ids, POLL_WAIT_MS, INLINE_MAX_BYTES
                )
            except grpc.RpcError:
                present, whole = [False] * len(ids), {}
            got = any(present)
            soon = time.monotonic() + (0.0 if got else 0.01)
            for oid, here in zip(ids, present, strict=False):
                if here:
                    if oid in whole:
                        meta, data = whole[oid]
                        if self._store_whole(oid, address, len(data), meta, data, release=True):
                            continue
                    self._start_fetch(oid, [address])
                else:  # (still forwarded there: not here; no store round trip each)
                    with self._lock:
                        waiting = oid in self.forwarded
                    if waiting or not self._have(oid):
                        with self._lock:
                            self.wanted.setdefault(oid, (soon, FIRST_LOOKUP_S))
        except Exception:
            logger.exception("polling %s failed", address)
        finally:
            with self._lock:
                self._polling.discard(address)
            if got:
                self._wake.set()

    def _have(self, object_id: bytes) -> bool:
        if self.client.contains(object_id):
            with self._lock:
                self.wanted.pop(object_id, None)
            return True
        return False

    def _start_fetch(self, object_id: bytes, addresses: list[str | None]) -> None:
        with self._lock:
            if object_id in self.inflight:
                return
            entry = self.wanted.pop(object_id, None)
            if entry is not None:
                self._backoff[object_id] = entry[1]
            self.inflight.add(object_id)
        self._pool.submit(self._fetch, object_id, addresses)

    def _fetch(self, object_id: bytes, addresses: list[str | None]) -> None:
        try:
            if is_code(object_id):
                if fetch_into(self.gcs, self.client, object_id):
                    return
                with self._lock:  # not exported to the GCS (too big): from a peer
                    self._code_from_peers.add(object_id)
            for address in addresses:
                if address is not None and self.pull(object_id, address):
                    return
            with self._lock:  # not there (yet, or any more): ask again later
                delay = min(MAX_BACKOFF_S, 2 * self._backoff.pop(object_id, FIRST_LOOKUP_S / 2))
                self.wanted[object_id] = (time.monotonic() + delay, delay)
        except Exception:
            logger.exception("fetching object %s failed", object_id.hex())
        finally:
            with self._lock:
                self.inflight.discard(object_id)

    def pull(self, object_id: bytes, address: str, wait_ms: int = PULL_WAIT_MS) -> bool:
        """Copy ``object_id`` from the node at ``address`` into the local store.

        Returns:
            True when the object is here (pulled now, or made here meanwhile); False when
            that node does not have it (within ``wait_ms``) or cannot be reached.
        """
        try:
            stored = write_chunks(
                self.client, object_id, self._stub(address).pull(object_id, wait_ms)
            )
        except grpc.RpcError as exc:
            logger.info("pulling %s from %s failed: %s", object_id.hex()[:16], address, exc)
            return False
        if stored:
            self._arrived(object_id, address, release=True)
        return stored is not False

    def _arrived(self, object_id: bytes, address: str, release: bool) -> None:
        """``object_id`` came from the node at ``address``: record the copy and, for a
        pulled result of a task forwarded there (``release``), let that node drop it."""
        self.recovery.result_here(object_id)
        self._result_back(object_id)
        with self._lock:
            self.wanted.pop(object_id, None)
            self._announced.discard(object_id)
            self._new_locations.setdefault(self.node_id, []).append(object_id)
            if self.forwarded.pop(object_id, None) == address and release:
                self._to_release.setdefault(address, []).append(object_id)

    # ---- stop ----------------------------------------------------------------------

    def shutdown(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self._send_batches()
        self.forwarder.close()
        self.lifecycle.close()
        self.pusher.close()
        self.events.stop()
        try:
            self.gcs.unregister_node(self.node_id)
        except Exception as exc:
            logger.debug("unregister failed: %s", exc)
        self.server.stop(grace=0.5).wait()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for channel, _ in self._channels.values():
                channel.close()
        self.client.close()
