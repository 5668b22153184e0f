"""The cluster side of a node: the agent that joins a :class:`~.node.Node` to a cluster.

A node started by ``rayfield start --address`` (or the head) hosts a ``Node`` (native
core and workers) and this :class:`NodeAgent`, which wires together:

* ``membership.py``: the heartbeat to the GCS (free resources, pending demand, sent
  early when the demand grew) and the view of the other nodes; a node's death reaches
  every part below; ``node_watch.py``: nodes that join, heard of at once from the GCS's
  ``NODE_ALIVE`` stream (work waiting for them is tried then);
* ``spillback.py``: tasks the local node cannot place, or that wait here for busy
  resources, forwarded to other nodes (``forwarding.py`` sends them in batches);
* ``arg_pins.py``: the arguments of tasks sent elsewhere, pinned until their results
  are back;
* ``actor_routing.py``: calls of actors hosted on other nodes, held and sent in order;
* ``object_manager.py`` (decisions in ``fetch_state.py``): objects local clients wait
  for, fetched from other nodes. Arguments of tasks this node forwards are pushed to
  the node they go to as soon as they are sealed (``object_push.py``); results of
  forwarded tasks are pulled by this node (a long poll of the node making them), not
  pushed; the bytes of large objects travel on the data channel (``data_channel.py``,
  ``data_pull.py``: plain TCP, the same token, TLS when the cluster has it), gRPC's
  ``PullObject`` where it cannot be set up;
* ``recovery.py`` and ``lifecycle.py``: what happens when a node, an actor or a driver
  ends;
* ``node_service.py``: the node's gRPC service for the other nodes, the CLI and the
  dashboard (the only module here that imports grpc);
* ``event_shipper.py``: the node's task events, sent to the GCS;
* ``bundle_sync.py``: the bundles of placement groups the GCS places here, reserved
  after every heartbeat;
* ``gcs_writer.py``: the GCS writes no thread waits for (object locations, actor
  records), in order on a thread of their own, kept while the GCS is down;
* ``object_frees.py`` (decisions in ``copies.py``): an object its owner freed here is
  freed on the other nodes that hold a copy and leaves the GCS object directory; an
  evicted copy leaves the directory.

Only the heartbeat, the event shipper and the GCS writer wait for the GCS, each on its
own thread: while the GCS is down (being restarted), tasks, actor calls and object
transfers between nodes whose places are known here go on. A GCS that does not answer
for ``gcs_reconnect_timeout_s`` (``gcs_reach.py``) is given up on: ``on_gcs_gone`` tells
the node process to shut down.

The agent itself handles the native core's cluster events (``events.py``), accepts
tasks forwarded here, and answers the node service (:class:`~.node_service.NodeBackend`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Container, Sequence
from typing import Any

from rayfield._private.common.ids import ORIGIN_BYTES, origin_of
from rayfield._private.gcs.client import GcsClient
from rayfield._private.node_manager import events as ev
from rayfield._private.node_manager.actor_routing import ActorRouter
from rayfield._private.node_manager.arg_pins import ArgPins
from rayfield._private.node_manager.bundle_sync import BundleSync
from rayfield._private.node_manager.data_channel import VERSION as DATA_VERSION
from rayfield._private.node_manager.data_channel import DataServer
from rayfield._private.node_manager.data_pull import DataClient
from rayfield._private.node_manager.event_shipper import EventShipper
from rayfield._private.node_manager.forwarding import SEND_ATTEMPTS, AcceptedTasks, Forwarder
from rayfield._private.node_manager.gcs_reach import DEFAULT_GCS_RECONNECT_TIMEOUT_S
from rayfield._private.node_manager.gcs_writer import GcsWriter
from rayfield._private.node_manager.introspect import Introspector
from rayfield._private.node_manager.lifecycle import Lifecycle, job_cancelled
from rayfield._private.node_manager.membership import Membership, PeerView
from rayfield._private.node_manager.node import Node
from rayfield._private.node_manager.node_service import PeerChannels, PeerError, RpcServer
from rayfield._private.node_manager.node_watch import NodeWatch
from rayfield._private.node_manager.object_frees import ObjectFrees
from rayfield._private.node_manager.object_manager import ObjectManager
from rayfield._private.node_manager.object_push import ObjectPusher
from rayfield._private.node_manager.recovery import Recovery
from rayfield._private.node_manager.spillback import Spillback
from rayfield._private.node_manager.task_spec import TakenTask, TaskSpec
from rayfield._private.node_manager.transfer import keep_freed_memory
from rayfield._private.protocol.types import NodeInfo
from rayfield._private.transport import TlsConfig
from rayfield.store import NOTIFIES_EVICTIONS, StoreClient

__all__ = ["NodeAgent"]

logger = logging.getLogger("rayfield")

# An argument another node pushes here (it named it in the forward) is asked for only if
# no push came within this long.
PUSH_FALLBACK_S = 1.0
# "0" switches the data channel off: objects travel on gRPC's PullObject stream only.
ENV_DATA_CHANNEL = "RAYFIELD_DATA_CHANNEL"


class _Locked:
    """``x in`` a container, under ``lock``."""

    def __init__(self, lock: threading.Lock, items: Container[bytes]) -> None:
        self.lock = lock
        self.items = items

    def __contains__(self, item: object) -> bool:
        with self.lock:
            return item in self.items


class NodeAgent:
    """Joins ``node`` to the cluster whose GCS is ``gcs``; see the module docstring.

    Args:
        node: the local node (its native server and worker pool).
        gcs: client of the cluster's GCS.
        token: the cluster token, required by every peer and by this node's service.
        host: address this node's gRPC service listens on (and is reached at).
        port: its TCP port; 0 picks a free one.
        tls: mutual TLS for the service and for channels to peers (None: plaintext).
        heartbeat_s: seconds between heartbeats.
        gcs_reconnect_timeout_s: seconds without reaching the GCS after which the node
            gives up on it (0 or less: never).
        on_gcs_gone: called once, from the heartbeat thread, with why the node gives up
            on the GCS; it must only ask for :meth:`shutdown`, not call it (None: logged).

    Raises:
        RuntimeError: when the port cannot be bound.
    """

    def __init__(
        self,
        node: Node,
        gcs: GcsClient,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsConfig | None = None,
        heartbeat_s: float = 0.5,
        gcs_reconnect_timeout_s: float = DEFAULT_GCS_RECONNECT_TIMEOUT_S,
        on_gcs_gone: Callable[[str], None] | None = None,
    ) -> None:
        keep_freed_memory()
        self.node = node
        self.gcs = gcs
        self.node_id = node.server.node_id
        self.store = StoreClient(node.socket_path, kind="driver")
        self.channels = PeerChannels(token, tls)
        self._lock = threading.Lock()
        self.accepted = AcceptedTasks()  # tasks forwarded here: never again, never moved
        self.arg_pins = ArgPins()
        self.recovery = Recovery(self.store, self._resubmit, self._actor_dead)
        self.server = RpcServer(self, token, host, port, tls)
        self.address = self.server.address
        self.peers = PeerView(self.node_id, self.address)
        self.data_server: DataServer | None = None
        self.data: DataClient | None = None
        if os.environ.get(ENV_DATA_CHANNEL, "1").strip() != "0":
            try:
                self.data_server = DataServer(node.socket_path, token, host, tls)
            except OSError as exc:  # peers pull from this node over gRPC instead
                logger.warning("no data channel on %s (objects go over gRPC): %s", host, exc)
            self.data = DataClient(token, tls, self._data_port_of)
        self.writer = GcsWriter(gcs, self.node_id)
        self.frees = ObjectFrees(
            self.node_id, self.address, gcs, self.writer, self.peers, self._send_free
        )
        self.objects = ObjectManager(
            self.node_id,
            self.address,
            self.store,
            gcs,
            self.writer,
            self.peers,
            self.channels,
            self._arrived,
            self.recovery.fail,
            node.server.waited,
            self.data,
            self.frees,
        )
        if not NOTIFIES_EVICTIONS:  # a removal could not be told from a free: none is acted on
            logger.warning(
                "this build of rayfield-store reports evictions as deletions: freed objects "
                "stay on the other nodes until evicted (rebuild the store)"
            )
        self.pusher = ObjectPusher(
            node.socket_path,
            self._send_push,
            self._pushed,
            removed=self._removed if NOTIFIES_EVICTIONS else None,
        )
        self.forwarder = Forwarder(self.send_batch)
        self.actors = ActorRouter(
            self.node_id,
            gcs,
            self.writer,
            self.peers,
            self.recovery.actor_dead,
            self.recovery.fail,
            self._send_calls,
            self._calls_sent,
            self._release_kept,
        )
        self.lifecycle = Lifecycle(
            self.node_id,
            gcs,
            self.writer,
            self.store,
            node.server,
            node.scopes,
            self.peers,
            self.channels,
            self.recovery,
            self.actors,
            self.objects.submit,
            self.objects.job_gone,
        )
        self.spillback = Spillback(
            node.server,
            self.store.client_id,
            self.peers,
            self.forwarder,
            self._pushed_args,
            self._sent,
            self._give_back,
            self.accepted_ids,
            node_id=self.node_id,
            keep=self._keep_here,
            on_demand=self._demand_changed,
        )
        self.introspector = Introspector(node, self.address)
        self.bundles = BundleSync(gcs, self.node_id, node.server, self.store, node.resources)
        self.info = NodeInfo(
            node_id=self.node_id,
            address=self.address,
            socket_path=node.socket_path,
            session_dir=str(node.session_dir),
            hostname=socket.gethostname(),
            resources_total=dict(node.resources),
            resources_available=dict(node.resources),
        )
        self.membership = Membership(
            gcs,
            self.info,
            self.peers,
            node.server.scheduler_snapshot,
            self.spillback.demands,
            self._node_died,
            self._after_heartbeat,
            heartbeat_s,
            gcs_reconnect_timeout_s,
            on_gcs_gone,
        )
        self.watch = NodeWatch(gcs, self.peers, self.spillback.node_joined)
        self.events = EventShipper(node.session_dir / "logs", gcs, self.address, self.node_id)
        self.writer.start()
        self.frees.start()
        self.objects.start()
        self.spillback.start()
        self.events.start()
        self.watch.start()
        # Registering makes the node known: peers forward work to it at once (they hear
        # of it from NODE_ALIVE), and that work's native events (code or arguments to
        # fetch) must reach this agent, so every part runs and the node hands its
        # events here before that.
        node.agent = self
        self.membership.start()

    # ---- the native core's events ---------------------------------------------------

    def on_event(self, event: ev.NodeEvent) -> bool:
        """Act on a cluster event of the native core (see ``node.ClusterAgent``)."""
        lc = self.lifecycle
        if isinstance(event, ev.TaskInfeasible):
            return self.spillback.spill(event.task_id, event.demand)
        if isinstance(event, ev.TaskPlacement):
            self.spillback.place(event.task_id, event.scheduling, event.demand, event.actor)
            return True
        if isinstance(event, ev.ObjectMissing):
            if event.client != self.store.client_id:  # not our own get while serving a pull
                self.objects.missing(event.object_id)
        elif isinstance(event, ev.MissingDependencies):
            for object_id in event.object_ids:  # arguments that may live on another node
                self.objects.missing(object_id)
        elif isinstance(event, ev.ActorTaskElsewhere):
            taken = self.node.server.take_task(event.task_id, self.store.client_id)
            if taken is not None:
                self.actors.call_elsewhere(event.actor_id, TakenTask.from_native(taken))
        elif isinstance(event, ev.ActorHandlesChanged):
            lc.handles_changed(event.actor_id, event.held, event.scoped)
        elif isinstance(event, ev.ActorStateChanged):
            lc.actor_state(event.actor_id, event.alive)
        elif isinstance(event, ev.ActorDied):
            lc.actor_died(event.actor_id, event.reason)
        elif isinstance(event, ev.ClientDisconnected):
            if event.driver:
                lc.driver_gone(event.pid)
        elif isinstance(event, ev.OwnerDied):
            lc.owner_died(event.pid, list(event.actor_ids))
        elif isinstance(event, ev.CancelElsewhere):
            lc.cancel_forwarded(list(event.task_ids), event.force)
        else:
            return False
        return True

    # ---- peers ----------------------------------------------------------------------

    def alive_peers(self) -> list[NodeInfo]:
        return self.peers.alive_peers()

    def _demand_changed(self) -> None:
        membership = getattr(self, "membership", None)  # None while the agent is built
        if membership is not None:
            membership.nudge()

    def _after_heartbeat(self) -> None:
        self.bundles.round()  # placement groups: the GCS's orders for this node
        self.spillback.retry()
        self.actors.retry_waiting()

    def _node_died(self, node: NodeInfo) -> None:
        logger.warning(
            "node %s (%s) died: %s",
            node.node_id.hex()[:12],
            node.address,
            node.death_reason or "no heartbeat",
        )
        self.objects.node_died(node.address)
        self.actors.node_died(node.address)
        self.channels.drop(node.address)
        if self.data is not None:
            self.data.forget(node.address)
        self.pusher.forget(node.address)
        self.frees.node_died(node.address)
        self.lifecycle.actors_restarted(self.recovery.node_died(node.address))
        with self._lock:
            pins = self.arg_pins.node_died(node.address)
        for task_pins in pins:
            self.store.unpin(list(task_pins))
        self.lifecycle.peer_died()  # the handles it held are gone

    def send_batch(
        self, address: str, tasks: Sequence[tuple[TaskSpec, list[bytes]]], in_order: bool = False
    ) -> list[str | None]:
        """Forward ``tasks`` (``(spec, pushed)`` each) to the node at ``address`` in one
        call; one outcome a task: None when it took it, else why not. A call that timed
        out or did not reach the peer is made again (the peer answers the tasks it took
        in an earlier try as accepted, without queueing them twice), up to
        ``SEND_ATTEMPTS`` times while the peer is alive."""
        why = ""
        for attempt in range(SEND_ATTEMPTS):
            try:
                return self.channels.stub(address).forward_batch(self.address, tasks, in_order)
            except PeerError as exc:
                why = str(exc)
                if not exc.retryable or not self.peers.is_alive(address):
                    break
                logger.info("forwarding to %s failed (%s); try %d again", address, why, attempt + 2)
                time.sleep(min(1.0, 0.1 * 2**attempt))
        return [why] * len(tasks)

    def _send_calls(self, address: str, calls: list[TakenTask]) -> list[str | None]:
        tasks = [(c.spec, self._pushed_args(address, c.spec)) for c in calls]
        return self.send_batch(address, tasks, in_order=True)

    def _pushed_args(self, address: str, spec: TaskSpec) -> list[bytes]:
        """The arguments of a task going to ``address`` that this node pushes there once
        sealed: those held here or made by this node's processes (they will be sealed
        here). The forward names them, so the receiver does not ask for them."""
        mine = self.node_id[:ORIGIN_BYTES]
        pushed = [
            dep for dep in spec.dependencies if origin_of(dep) == mine or self.store.contains(dep)
        ]
        for dep in pushed:
            self.pusher.push_when_sealed(dep, address)
        return pushed

    # ---- tasks sent elsewhere -------------------------------------------------------

    def _sent(self, taken: TakenTask, peer: NodeInfo) -> None:
        """Bookkeeping of a task ``peer`` accepted: where its results are made, its spec
        for recovery, its argument pins, the new home of an actor."""
        spec = taken.spec
        self.objects.made_at(spec.return_ids, peer.address, peer.node_id)
        self.recovery.record(spec, peer.address)
        self._release_handles(taken.kept_handles)  # the peer's node counted them
        self._hold_args(spec, taken.kept_pins, peer.address)
        if spec.actor_creation and spec.actor_id is not None:
            self.actors.moved(spec.actor_id, peer)

    def _calls_sent(self, calls: list[TakenTask], address: str) -> None:
        """Bookkeeping of actor calls the actor's node at ``address`` took (a batch, in
        order): their specs for recovery, their argument pins, one release of the actor
        handles they held, and where their results are made."""
        if not calls:
            return
        self.recovery.record_many([c.spec for c in calls], address)
        # the peer's node counted the handles before it accepted the calls
        self._release_handles([a for c in calls for a in c.kept_handles])
        for call in calls:
            self._hold_args(call.spec, call.kept_pins, address)
        self.objects.made_at([r for c in calls for r in c.spec.return_ids], address)

    def _hold_args(self, spec: TaskSpec, pins: tuple[bytes, ...], address: str) -> None:
        """Keep the arguments ``pins`` of a task sent to ``address`` pinned until its
        results are back; an actor's creation arguments for its lifetime (a restart reads
        them again)."""
        if not pins or spec.actor_creation:
            return
        if not spec.return_ids:  # nothing tells when it ran: its node pinned them on arrival
            self.store.unpin(list(pins))
            return
        with self._lock:
            self.arg_pins.hold(spec.task_id, address, pins, spec.return_ids)

    def _removed(self, object_id: bytes, evicted: bool, size: int) -> None:
        """The store removed ``object_id`` (``evicted``, else its owner freed it, maybe
        before any copy came here): the other copies go, and a result being made
        elsewhere is freed there once made. The store reports a free of an id it did not
        hold as a deletion of no bytes; an empty object passes for one, which costs only
        an entry in ``FetchState.freed_early``."""
        self.frees.removed(object_id, evicted, size)
        if not evicted:
            self.objects.freed([object_id], copy_here=size > 0)

    def _arrived(self, object_ids: list[bytes]) -> None:
        """Objects came from another node: their tasks need not run again, and once all
        of a task's results are here its arguments are unpinned."""
        calls_done = self.recovery.results_here(object_ids)
        if calls_done:
            self.actors.results_back(calls_done)
        with self._lock:
            pins = [p for oid in object_ids for p in self.arg_pins.result_back(oid)]
        if pins:
            self.store.unpin(pins)

    def _give_back(self, taken: TakenTask) -> None:
        """Queue a taken task here again (no peer took it), unless its driver exited."""
        ended = self.lifecycle.job_ended_of(taken.spec.task_id)
        if ended is not None:
            self.recovery.fail(taken.spec.return_ids, "CANCELLED", job_cancelled(ended))
        else:
            self._resubmit(taken.spec)  # pins its arguments again
        self._release_kept(taken)

    def _release_kept(self, taken: TakenTask) -> None:
        """Drop what ``take_task`` handed to the agent's client: argument pins and actor
        handles."""
        if taken.kept_pins:
            self.store.unpin(list(taken.kept_pins))
        self._release_handles(taken.kept_handles)

    def _release_handles(self, actor_ids: Sequence[bytes]) -> None:
        """Drop the actor handles ``take_task`` handed to the agent's client, in one call."""
        if actor_ids:
            self.store.actor_handles(list(actor_ids), False)

    def _resubmit(self, spec: TaskSpec, pin_returns: bool = False, resume: bool = False) -> None:
        self.store.submit_task(*spec.submit_args(pin_returns, resume))

    def _actor_dead(self, actor_id: bytes, why: str) -> None:
        self.lifecycle.actor_died(actor_id, why)

    def _keep_here(self, task_id: bytes) -> None:
        """A task its node affinity placed here: like a task forwarded here, it never
        moves."""
        with self._lock:
            self.accepted.take(task_id)

    def accepted_ids(self) -> Container[bytes]:
        """The tasks forwarded here (they never move again), as a membership test that
        takes the lock (load-based placement asks about a few ready tasks; a copy of up to
        100,000 ids, several times a second, cost more than the rest of it)."""
        return _Locked(self._lock, self.accepted)

    # ---- the node service (node_service.NodeBackend) --------------------------------

    def accept_forwarded(self, origin: str, spec: TaskSpec, pushed: list[bytes]) -> None:
        """Queue a task forwarded by the node at ``origin``; fetch its missing arguments
        (those in ``pushed`` only if ``origin`` does not push them). Its results stay
        pinned here until ``origin`` pulled them (it long-polls this node for them). A
        task of a job whose driver exited is not run: its results are ``CANCELLED``
        errors."""
        ended = self.lifecycle.job_ended_of(spec.task_id)
        if ended is not None:
            self.recovery.fail(spec.return_ids, "CANCELLED", job_cancelled(ended))
            return
        with self._lock:
            if not self.accepted.take(spec.task_id):
                return  # a retried call: queued here by an earlier try already
        self.objects.hold(spec.return_ids)
        coming = set(pushed)
        for dep in spec.dependencies:
            if not self.store.contains(dep):
                self.objects.want(dep, origin, PUSH_FALLBACK_S if dep in coming else 0.0)
        self._resubmit(spec, pin_returns=True, resume=spec.is_actor_call)

    def counted(self) -> None:
        """Return once the native node has read every task submitted so far (one round
        trip on the same socket): the actor handles they hold are counted, so the node
        that forwarded them may drop its own."""
        self.store.contains(bytes(20))

    def release_held(self, ids: list[bytes]) -> None:
        self.objects.release_held(ids)

    def free_objects(self, ids: list[bytes]) -> None:
        """Their owner freed ``ids`` on another node: drop the copies here (at once when
        nothing here uses them, else when the last use ends) and any hold on them."""
        self.frees.freed_elsewhere(ids)
        self.objects.release_held(ids)
        self.store.delete(ids)

    def receive_push(
        self, object_id: bytes, sender: str, size: int, meta: bytes, data: Any
    ) -> bool:
        return self.objects.receive_push(object_id, sender, size, meta, data)

    def cancel_task(self, task_id: bytes, force: bool, hops: int, recursive: bool) -> str:
        return self.lifecycle.cancel(task_id, force, hops, recursive)

    def cancel_job(self, job_id: bytes) -> int:
        return self.lifecycle.cancel_job(job_id)

    def actors_held(self, actor_ids: list[bytes]) -> list[bool]:
        return list(self.node.server.actors_held(actor_ids))

    def actors_released(self, actor_ids: list[bytes]) -> None:
        self.lifecycle.peers_released(actor_ids)

    def sync_bundles(self) -> None:
        self.bundles.round()

    def introspect(self, objects: bool, max_objects: int) -> dict[str, Any]:
        return self.introspector.introspect(objects, max_objects)

    def list_logs(self) -> list[dict[str, Any]]:
        return self.introspector.list_logs()

    def read_log(self, name: str, offset: int, max_bytes: int) -> dict[str, Any]:
        return self.introspector.read_log(name, offset, max_bytes)

    def data_port(self, version: int) -> int:
        if self.data_server is None or version != DATA_VERSION:
            return 0
        return self.data_server.port

    def _data_port_of(self, address: str) -> int:
        return self.channels.stub(address).data_port(DATA_VERSION)

    def _send_push(self, address: str, object_id: bytes, size: int, meta: bytes, data: Any) -> bool:
        return self.channels.stub(address).push(object_id, self.address, size, meta, data)

    def _pushed(self, object_id: bytes, address: str, ok: bool) -> None:
        """After a push that ``address`` took: if this node held ``object_id`` for another
        node (a result of a task forwarded here), it unpins it. Pushed or announced, the
        object may be copied there: freed, it is freed there too."""
        self.frees.copied([object_id], address)
        if ok:
            self.release_held([object_id])

    def _send_free(self, address: str, object_ids: list[bytes]) -> None:
        self.channels.stub(address).free(object_ids)

    # ---- stop -----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the agent's threads, leave the cluster, close the service and channels.

        Threads that wake on a timer are told first and joined later, so their waits
        overlap. Closing the GCS client last ends the GCS calls still retried on pool
        threads (an actor lookup while the GCS is down), so the process exits at once.
        """
        self.pusher.stop()
        self.watch.stop()
        self.membership.stop()
        self.spillback.stop()
        self.objects.stop()
        self.forwarder.close()
        self.lifecycle.close()
        self.actors.close()
        self.pusher.close()
        self.events.stop()
        self.frees.stop()
        self.writer.stop()
        self.membership.leave()
        self.server.stop(0.5)
        if self.data_server is not None:
            self.data_server.close()
        if self.data is not None:
            self.data.close()
        self.objects.close()
        self.channels.close()
        self.store.close()
        self.gcs.close()
