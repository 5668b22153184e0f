"""The cluster side of a node: GCS membership, spillback and object transfer.

A node started by ``rayfield start`` hosts a ``LocalNode`` (native core and workers) and
this ``NodeAgent``, which

* registers the node with the GCS and sends a heartbeat every ``heartbeat_s`` with the
  free resources and the pending demand (queued and infeasible work by resource shape),
  and keeps the cluster view the GCS answers;
* forwards (spills back) work the local node cannot place to an alive node whose totals
  fit it (``task_infeasible`` events); work nobody can place waits, and is placed when a
  fitting node joins;
* fetches objects a local client waits for but the node lacks (``object_missing``
  events): from the node a task was forwarded to, else from the GCS object directory,
  else by asking every alive node; the object is pulled in chunks over gRPC and written
  straight into the local store;
* serves ``/rayfield.Node`` (``node_service.py``) to the other nodes, and to the CLI
  and dashboard for introspection (``introspect.py``);
* sends the node's task events to the GCS (``event_shipper.py``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc

from rayfield._private.cluster import messages
from rayfield._private.cluster.event_shipper import EventShipper
from rayfield._private.cluster.introspect import Introspector
from rayfield._private.cluster.node_service import STREAMING_METHODS, NodeService, NodeStub
from rayfield._private.cluster.recovery import Recovery
from rayfield._private.gcs.auth import TlsConfig, TokenInterceptor, auth_metadata, open_channel
from rayfield._private.gcs.client import GcsClient
from rayfield._private.gcs.types import ActorInfo, ActorState, NodeInfo, ResourceDemand
from rayfield._private.runtime import ORIGIN_BYTES, origin_of
from rayfield.store import StoreClient
from rayfield.store.errors import ObjectExistsError

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


def fits(demand: dict[str, float], total: dict[str, float]) -> bool:
    return all(total.get(k, 0.0) + 1e-9 >= v for k, v in demand.items() if v > 0)


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
        self.recovery = Recovery(self.client, self._resubmit)
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

    def _forward(self, address: str, spec: dict[str, Any]) -> str | None:
        """Forward a task to the node at ``address``; None when it took it, else why not."""
        try:
            return self._stub(address).forward(self.address, spec)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"

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
        spec = self.node.server.take_task(task_id)
        with self._lock:
            self.infeasible.pop(task_id, None)
        if spec is None:  # an actor (they stay where submitted), or no longer queued
            return False
        candidates.sort(key=lambda n: -sum(n.resources_available.get(k, 0.0) for k in demand))
        for peer in candidates:
            why = self._forward(peer.address, spec)
            if why is None:
                with self._lock:
                    self.not_before.pop(task_id, None)
                    for rid in spec["return_ids"]:
                        self._made_at(rid, peer.address)
                    self._new_locations.setdefault(peer.node_id, []).extend(spec["return_ids"])
                self.recovery.record(spec, peer.address)
                if spec.get("actor_creation"):
                    self._actor_moved(spec["actor_id"], peer)
                return True
            logger.warning("node %s refused a task: %s", peer.address, why)
        with self._lock:  # it stays queued (infeasible) here; tried again in a second
            self.not_before[task_id] = time.monotonic() + 1.0
        self._resubmit(spec)
        return True

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
        spec = self.node.server.take_task(task_id)
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
        if info is None or not info.node_id or info.node_id == self.node_id:
            return None
        with self._lock:
            peer = self.peers.get(info.node_id)
        if peer is None or not peer.alive:
            return None
        with self._lock:
            self.actor_locations[actor_id] = peer.address
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
            return
        assert address is not None
        for i, spec in enumerate(calls):
            why = self._forward(address, spec)
            if why is not None:
                logger.warning("could not forward an actor call to %s: %s", address, why)
                with self._lock:
                    rest = self.pending_calls.get(actor_id, [])
                    self.pending_calls[actor_id] = calls[i:] + rest
                return
            self.recovery.record(spec, address)
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
        self.recovery.node_died(node.address)

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
        ]
        self.client.submit_task(**{k: spec[k] for k in keys if k in spec})

    def accept_forwarded(self, origin: str, spec: dict[str, Any]) -> None:
        """Queue a task forwarded by the node at ``origin``; fetch its missing arguments."""
        with self._lock:
            self.held.update(spec["return_ids"])
        for dep in spec["dependencies"]:
            if not self.client.contains(dep):
                self.want(dep, origin)
        resume = bool(spec.get("actor_id")) and not spec.get("actor_creation")
        self._resubmit(dict(spec, pin_returns=True, resume_sequence=resume))

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
        self.want(object_id, hint)

    def want(self, object_id: bytes, hint: str | None = None) -> None:
        """Fetch ``object_id`` into the local store (from ``hint`` first, if given)."""
        with self._lock:
            if object_id in self.inflight or object_id in self.wanted:
                return
            if hint is not None:  # asked at once, by the long poll of that node
                self.forwarded.setdefault(object_id, hint)
                self.wanted[object_id] = (time.monotonic(), FIRST_LOOKUP_S)
            else:
                self.wanted[object_id] = (time.monotonic() + FIRST_LOOKUP_S, FIRST_LOOKUP_S)

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
        while not self._stop.wait(0.05):
            self._send_batches()
            now = time.monotonic()
            with self._lock:
                due = [oid for oid, (t, _) in self.wanted.items() if t <= now]
            due = [oid for oid in due if not self._have(oid)]
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
            with self._lock:
                if oid not in self.wanted or self.client.contains(oid):
                    continue
                if owner is None or owner.alive or oid in self.forwarded:
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
        """Long-poll the node at ``address`` until one of ``ids`` is there; fetch those that
        are, and want the others again at once (the poll itself did the waiting)."""
        try:
            try:
                present = self._stub(address).has_objects(ids, wait_ms=POLL_WAIT_MS)
            except grpc.RpcError:
                present = [False] * len(ids)
            soon = time.monotonic() + 0.01
            for oid, here in zip(ids, present, strict=False):
                if here:
                    self._start_fetch(oid, [address])
                elif not self._have(oid):
                    with self._lock:
                        self.wanted.setdefault(oid, (soon, FIRST_LOOKUP_S))
        except Exception:
            logger.exception("polling %s failed", address)
        finally:
            with self._lock:
                self._polling.discard(address)

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
        view = None
        try:
            for raw in self._stub(address).pull(object_id, wait_ms):
                found, size, meta, offset, data = messages.decode_chunk(raw)
                if view is None:
                    if not found:
                        return False
                    try:
                        view = self.client.create(object_id, size, meta)
                    except ObjectExistsError:
                        return True
                view[offset : offset + len(data)] = data
            if view is None:
                return False
            self.client.seal(object_id)
            view = None
        except grpc.RpcError as exc:
            logger.info("pulling %s from %s failed: %s", object_id.hex()[:16], address, exc)
            return False
        finally:
            if view is not None:
                self.client.abort(object_id)
        self.recovery.result_here(object_id)
        with self._lock:
            self._new_locations.setdefault(self.node_id, []).append(object_id)
            if self.forwarded.pop(object_id, None) == address:
                self._to_release.setdefault(address, []).append(object_id)
        return True

    # ---- stop ----------------------------------------------------------------------

    def shutdown(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self._send_batches()
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
