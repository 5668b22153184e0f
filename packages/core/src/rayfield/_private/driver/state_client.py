"""Cluster-wide state for the CLI, the dashboard and ``rayfield.util.state``.

``StateClient`` joins what the GCS knows (nodes, actors, the task events every node
sends) with what each alive node reports about itself over its ``/rayfield.Node``
service (load, workers, running tasks, stored objects, log files). Nodes are asked in
parallel; a node that does not answer within ``node_timeout_s`` is listed with
``"reachable": False`` instead of failing the whole query.

Every record is a plain dict of JSON-friendly values (ids as hex strings, sizes in
bytes, times in Unix seconds), so callers can print it as a table or JSON.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rayfield._private import transport
from rayfield._private.common import events as _events
from rayfield._private.driver import launch
from rayfield._private.driver.embedded_state import (
    EMBEDDED_ADDRESS,
    EmbeddedGcs,
    EmbeddedNodeStub,
    Inline,
)
from rayfield._private.driver.state_records import decode_events, payload_class, pin_reason
from rayfield._private.protocol.constants import MAX_MESSAGE_BYTES
from rayfield._private.protocol.errors import NodeCallError
from rayfield._private.protocol.types import ActorState, NodeInfo
from rayfield._private.transport import TlsConfig, auth_metadata, open_channel

if TYPE_CHECKING:
    from rayfield._private.gcs.client import GcsClient
    from rayfield._private.node_manager.node import Node
    from rayfield._private.node_manager.node_service import NodeStub

__all__ = ["StateClient", "StateError", "decode_events", "kill_actor_elsewhere", "pin_reason"]

T = TypeVar("T")
logger = logging.getLogger("rayfield")
_WORKER_LOG = re.compile(r"^worker-(\d+)\.out$")


class StateError(RuntimeError):
    """The cluster cannot answer: no cluster found, or a named node, actor, task or
    process that does not exist. The message says what to do."""


class _CheckedNode:
    """A :class:`NodeStub` whose calls raise :class:`NodeCallError` instead of the
    transport's error, so no gRPC type leaves the state API."""

    def __init__(self, stub: NodeStub, address: str) -> None:
        self._stub = stub
        self._address = address

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except transport.RpcError as exc:
                raise NodeCallError(*transport.status(exc), self._address) from None

        return call


class StateClient:
    """Queries a cluster's state.

    Args:
        address: the GCS as HOST:PORT; None: the head running on this machine.
        token: the cluster token; None: ``$RAYFIELD_TOKEN`` or the head's session here.
        temp_dir: root of the session directories used to find the head and the token.
        tls: mutual TLS settings; None: from ``RAYFIELD_TLS_*`` if set.
        node_timeout_s: how long to wait for one node's answer.

    Raises:
        StateError: when no address is given and no head runs on this machine, or the
            token cannot be found.
    """

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        temp_dir: Path | None = None,
        tls: TlsConfig | None = None,
        node_timeout_s: float = 5.0,
    ) -> None:
        try:
            self.address = address or launch.find_gcs_address(temp_dir)
            token = token or launch.find_token(self.address, temp_dir)
        except launch.ClusterError as exc:
            raise StateError(str(exc)) from None
        self.tls = tls if tls is not None else TlsConfig.from_env()
        from rayfield._private.gcs.client import GcsClient  # (the wire code loads here)

        self.gcs = GcsClient(self.address, token, tls=self.tls or False, retry_deadline_s=5)
        self.metadata = auth_metadata(token)
        self.node_timeout_s = node_timeout_s
        self._channels: dict[str, Any] = {}  # address -> transport channel
        self._pool: ThreadPoolExecutor | Inline = ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="rayfield-state"
        )
        self._embedded: EmbeddedNodeStub | None = None

    @classmethod
    def embedded(cls, node: Node) -> StateClient:
        """The same queries, answered for a driver whose ``init()`` started ``node``
        (no GCS): the node is the only one; actors, tasks and jobs come from its
        session's task events (``embedded_state.py``)."""
        self = cls.__new__(cls)
        self.address = EMBEDDED_ADDRESS
        self.tls = None
        self.gcs = EmbeddedGcs(node)  # type: ignore[assignment]
        self.metadata = ()
        self.node_timeout_s = 5.0
        self._channels = {}
        self._pool = Inline()  # one node, in this process: no threads
        self._embedded = EmbeddedNodeStub(node)
        return self

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for channel in self._channels.values():
            channel.close()
        self.gcs.close()

    def __enter__(self) -> StateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing ---------------------------------------------------------------------

    def node(self, address: str) -> _CheckedNode:
        """A client of the node service at ``address``; its calls raise
        :class:`NodeCallError` when they fail."""
        if self._embedded is not None:
            return _CheckedNode(self._embedded, address)  # type: ignore[arg-type]
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self.tls, MAX_MESSAGE_BYTES)
        from rayfield._private.node_manager.node_service import NodeStub

        return _CheckedNode(NodeStub(channel, self.metadata), address)

    def _each_node(
        self, fn: Callable[[_CheckedNode], T], nodes: list[NodeInfo] | None = None
    ) -> list[tuple[NodeInfo, T | None, str]]:
        """``fn`` on every alive node in parallel: (node, result or None, error text)."""
        alive = [n for n in (nodes if nodes is not None else self.gcs.get_nodes()) if n.alive]

        def one(n: NodeInfo) -> tuple[NodeInfo, T | None, str]:
            try:
                return n, fn(self.node(n.address)), ""
            except NodeCallError as exc:
                return n, None, f"{exc.status}: {exc.details}"

        return list(self._pool.map(one, alive))

    def _introspect_all(
        self, nodes: list[NodeInfo] | None = None
    ) -> list[tuple[NodeInfo, dict[str, Any] | None, str]]:
        """Every alive node's ``Introspect`` answer (without objects), in parallel."""
        return self._each_node(lambda s: s.introspect(timeout_s=self.node_timeout_s), nodes)

    def resolve_node(self, node: str) -> NodeInfo:
        """The alive node whose id (or a prefix of it), address or host matches ``node``.

        Raises:
            StateError: when no alive node, or more than one, matches.
        """
        alive = [n for n in self.gcs.get_nodes() if n.alive]
        found = [
            n
            for n in alive
            if n.node_id.hex().startswith(node.lower()) or node in (n.address, n.hostname)
        ]
        if len(found) != 1:
            known = ", ".join(f"{n.node_id.hex()[:12]} ({n.address})" for n in alive)
            what = "no alive node" if not found else f"{len(found)} nodes"
            raise StateError(f"{what} match {node!r}; alive nodes: {known or 'none'}")
        return found[0]

    # ---- listings ---------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """Every node the GCS knows, alive or dead, with live load for alive ones."""
        infos = self.gcs.get_nodes()
        live = {n.node_id: (stats, err) for n, stats, err in self._introspect_all(infos)}
        out = []
        for n in infos:
            stats, err = live.get(n.node_id, (None, ""))
            row: dict[str, Any] = {
                "node_id": n.node_id.hex(),
                "address": n.address,
                "hostname": n.hostname,
                "alive": n.alive,
                "death_reason": n.death_reason,
                "resources_total": n.resources_total,
                "resources_available": n.resources_available,
                "last_heartbeat_s": n.last_heartbeat_s,
                "idle_duration_s": n.idle_duration_s,
                "reachable": stats is not None,
                "error": err,
            }
            if stats is not None:
                row.update(
                    {
                        "cpu_percent": stats["cpu_percent"],
                        "memory_used": stats["memory_used"],
                        "memory_total": stats["memory_total"],
                        "store_used": stats["store_used"],
                        "store_capacity": stats["store_capacity"],
                        "num_objects": stats["num_objects"],
                        "num_spilled": stats["num_spilled"],
                        "num_workers": len(stats["workers"]),
                        "tasks_running": len(stats["running"]),
                        "tasks_queued": stats["tasks_queued"],
                        "tasks_waiting": stats["tasks_waiting"],
                        "tasks_infeasible": stats["tasks_infeasible"],
                    }
                )
            out.append(row)
        return out

    def node_records(self) -> list[dict[str, Any]]:
        """Every node as the GCS records it, alive or dead, without asking the nodes:
        ``node_id`` (hex), ``address``, ``alive``, ``death_reason``, ``hostname``,
        ``resources_total``, ``resources_available``, ``demand`` (a list of ``shape``,
        ``count``, ``infeasible``: the node's last heartbeat), ``last_heartbeat_s`` and
        ``idle_duration_s`` (seconds the node had been idle at that heartbeat: nothing
        running, queued or leased; 0.0 while busy)."""
        return [
            {
                "node_id": n.node_id.hex(),
                "address": n.address,
                "alive": n.alive,
                "death_reason": n.death_reason,
                "hostname": n.hostname,
                "resources_total": n.resources_total,
                "resources_available": n.resources_available,
                "demand": [
                    {"shape": d.shape, "count": d.count, "infeasible": d.infeasible}
                    for d in n.demand
                ],
                "last_heartbeat_s": n.last_heartbeat_s,
                "idle_duration_s": n.idle_duration_s,
            }
            for n in self.gcs.get_nodes()
        ]

    def resource_demand(self) -> list[dict[str, Any]]:
        """Pending work of the alive nodes by resource shape: ``node_id``, ``address``,
        ``shape``, ``count``, ``infeasible`` (see ``rayfield.util.state.resource_demand``)."""
        return [
            {"node_id": n["node_id"], "address": n["address"], **d}
            for n in self.node_records()
            if n["alive"]
            for d in n["demand"]
        ]

    def _kv(self) -> GcsClient:
        if self._embedded is not None:
            raise StateError(
                "the embedded runtime (rayfield.init() without an address) has no GCS and so "
                "no key-value store: start a cluster with `rayfield start --head` and "
                "connect with rayfield.init(address='auto')"
            )
        return self.gcs

    def kv_get(self, namespace: str, key: str | bytes) -> bytes | None:
        """The value under ``key`` in the GCS key-value store's ``namespace``, or None."""
        return self._kv().kv_get(namespace, key)

    def kv_put(
        self, namespace: str, key: str | bytes, value: bytes, overwrite: bool = True
    ) -> bool:
        """Store ``value`` under ``key`` in ``namespace``; True when the key was new."""
        return self._kv().kv_put(namespace, key, value, overwrite)

    def kv_del(self, namespace: str, key: str | bytes) -> bool:
        """Delete ``key`` from ``namespace``; True when it existed."""
        return self._kv().kv_del(namespace, key)

    def kv_keys(self, namespace: str, prefix: str | bytes = b"") -> list[bytes]:
        """The keys of ``namespace`` that start with ``prefix``, sorted."""
        return list(self._kv().kv_keys(namespace, prefix))

    def jobs(self) -> list[dict[str, Any]]:
        """Every job (connected driver) the GCS recorded, newest first: RUNNING, FINISHED,
        or FAILED when its node died before it finished."""
        nodes = {n.node_id: n for n in self.gcs.get_nodes()}
        out = []
        for j in self.gcs.list_jobs():
            node = nodes.get(j.node_id)
            state = "FINISHED" if j.finished else "RUNNING"
            if not j.finished and node is not None and not node.alive:
                state = "FAILED"
            out.append(
                {
                    "job_id": j.job_id.hex(),
                    "state": state,
                    "driver_pid": j.driver_pid,
                    "node": node.address if node is not None else "",
                    "node_id": j.node_id.hex(),
                    "entrypoint": j.entrypoint,
                    "start_s": j.start_time_s,
                    "end_s": j.end_time_s or None,
                }
            )
        return sorted(out, key=lambda r: -r["start_s"])

    def task_events(self, limit: int = 0) -> list[dict[str, Any]]:
        """The task events the GCS keeps (most recent ``limit``; 0: all), oldest first."""
        return decode_events(self.gcs.get_task_events(limit))

    def workers(self) -> list[dict[str, Any]]:
        """Every worker process of every alive node: node, pid, state ("idle", "busy" or
        "actor"), ``actor_id`` for actor hosts, ``cpu_percent``, ``rss_bytes``."""
        hosts = {
            (e.get("node", ""), e.get("pid")): e["actor"]
            for e in self.task_events()
            if _events.is_actor_creation(e)
        }
        out = []
        for n, stats, _ in self._introspect_all():
            for w in stats["workers"] if stats else []:
                actor = hosts.get((n.address, w["pid"]))
                row = {"node_id": n.node_id.hex(), "node": n.address, **w, "actor_id": actor}
                if actor is not None:
                    row["state"] = "actor"
                out.append(row)
        return out

    def actors(self) -> list[dict[str, Any]]:
        """Every actor: those the GCS records (every actor of the cluster, with its state)
        and those the task events show created (events add the worker pid; an actor only
        the events know, from before its record, is ALIVE while its worker runs)."""
        created = {e["actor"]: e for e in self.task_events() if _events.is_actor_creation(e)}
        infos = self.gcs.get_nodes()
        nodes = {n.node_id.hex(): n.address for n in infos}
        live = {
            (n.address, w["pid"])
            for n, stats, _ in self._introspect_all(infos)
            for w in (stats["workers"] if stats else [])
        }
        out: dict[str, dict[str, Any]] = {}
        for actor_id, e in created.items():
            ok = e.get("ok", True) and (e.get("node", ""), e.get("pid")) in live
            out[actor_id] = {
                "actor_id": actor_id,
                "class_name": e["name"][: -len(".__init__")],
                "name": e.get("actor_name") or "",
                "namespace": e.get("namespace") or "",
                "detached": False,
                "state": "ALIVE" if ok else "DEAD",
                "node_id": e.get("node_id", ""),
                "node": e.get("node", ""),
                "pid": e.get("pid"),
            }
        for a in self.gcs.list_actors():
            hex_id = a.actor_id.hex()
            row = out.setdefault(
                hex_id,
                {
                    "actor_id": hex_id,
                    "class_name": payload_class(a.payload),
                    "pid": None,
                    "node": "",
                },
            )
            created_here = a.state == ActorState.PENDING_CREATION and "state" in row
            row.update(
                {
                    "name": a.name,
                    "namespace": a.namespace,
                    "detached": a.detached,
                    # a name is recorded before its creation; the events show it done
                    "state": row["state"] if created_here else a.state.name,
                    "node_id": a.node_id.hex(),
                    "node": nodes.get(a.node_id.hex(), row["node"]),
                }
            )
        return list(out.values())

    def tasks(self, limit: int = 0) -> list[dict[str, Any]]:
        """Tasks and actor calls: RUNNING ones from the nodes, then FINISHED and FAILED
        ones from the task events (``limit``: the most recent events only)."""
        out = []
        for n, stats, _ in self._introspect_all():
            for t in stats["running"] if stats else []:
                out.append(
                    {
                        "task_id": t["task_id"].hex(),
                        "name": "",
                        "state": "RUNNING",
                        "actor_task": t["actor_task"],
                        "pid": t["pid"],
                        "node": n.address,
                        "node_id": n.node_id.hex(),
                    }
                )
        for e in self.task_events(limit):
            if e.get("kind") != "task":
                continue
            out.append(
                {
                    "task_id": e.get("task", ""),
                    "name": e.get("name", ""),
                    "state": "FINISHED" if e.get("ok", True) else "FAILED",
                    "actor_task": bool(e.get("actor")),
                    "actor_id": e.get("actor"),
                    "pid": e.get("pid"),
                    "node": e.get("node", ""),
                    "node_id": e.get("node_id", ""),
                    "submit_s": e.get("submit"),
                    "end_s": e.get("end"),
                    "duration_s": (e.get("run") or 0) - (e.get("args") or 0),
                }
            )
        return out

    def objects(self, max_per_node: int = 0) -> list[dict[str, Any]]:
        """Objects in every alive node's store, largest first, with owner and pin reason."""
        out = []
        for n, stats, _ in self._each_node(
            lambda s: s.introspect(objects=True, max_objects=max_per_node, timeout_s=10)
        ):
            for o in stats["objects"] if stats else []:
                out.append(
                    {
                        "object_id": o["object_id"].hex(),
                        "size_bytes": o["data_size"] + o["metadata_size"],
                        "node": n.address,
                        "node_id": n.node_id.hex(),
                        "owner_pid": o["owner_pid"] or None,
                        "ref_count": o["ref_count"],
                        "pin_count": o["pin_count"],
                        "buffer_count": o["buffer_count"],
                        "spilled": o["spilled"],
                        "sealed": o["sealed"],
                        "reason": pin_reason(o),
                        "create_time_s": o["create_time_ms"] / 1000,
                    }
                )
        return sorted(out, key=lambda o: -o["size_bytes"])

    def present_anywhere(self, object_ids: list[bytes]) -> list[bool]:
        """Which of ``object_ids`` some alive node's store holds now (each node's
        ``HasObjects``, in parallel); nothing is fetched or moved."""
        found = [False] * len(object_ids)
        for _, present, _ in self._each_node(
            lambda s: s.has_objects(object_ids) if object_ids else []
        ):
            for i, here in enumerate(present or ()):
                found[i] = found[i] or here
        return found

    def timeline(self, limit: int = 0) -> list[dict[str, Any]]:
        """The task events as Chrome trace events (chrome://tracing, Perfetto)."""
        return _events.to_chrome_trace(self.task_events(limit))

    # ---- control --------------------------------------------------------------------------

    def kill_actor(self, actor_id: bytes, no_restart: bool = True) -> bool:
        """Kill an actor wherever it lives: its node in the GCS actor table first, then
        every other alive node. False when no node hosts it."""
        alive = [n for n in self.gcs.get_nodes() if n.alive]
        record = self.gcs.get_actor(actor_id)
        if record is not None:
            alive.sort(key=lambda n: n.node_id != record.node_id)
        for n in alive:
            try:
                if self.node(n.address).kill_actor(actor_id, no_restart, self.node_timeout_s):
                    return True
            except NodeCallError:
                continue
        return False

    def sync_bundles(self, node_ids: set[str]) -> None:
        """Have the alive nodes of ``node_ids`` (hex) sync their placement group bundles
        with the GCS now, in parallel; returns when they answered (a node that fails the
        call is skipped: it syncs at its next heartbeat)."""
        nodes = [n for n in self.gcs.get_nodes() if n.node_id.hex() in node_ids]
        for n, _, error in self._each_node(lambda s: s.sync_bundles(self.node_timeout_s), nodes):
            if error:
                logger.debug("bundle sync of node %s: %s", n.address, error)

    # ---- logs ---------------------------------------------------------------------------

    def logs(self, node: str | None = None) -> list[dict[str, Any]]:
        """Log files of every alive node (or of ``node``): node, name, size, mtime_s."""
        nodes = [self.resolve_node(node)] if node else None
        out = []
        for n, files, _ in self._each_node(lambda s: s.list_logs(self.node_timeout_s), nodes):
            for f in files or []:
                out.append({"node": n.address, "node_id": n.node_id.hex(), **f})
        return out

    def find_log(
        self, pid: int | None = None, actor_id: str | None = None, task_id: str | None = None
    ) -> tuple[str, str]:
        """(node address, file name) of the log of a worker process, given its pid or an
        actor or task it ran (a hex id or a unique prefix).

        Raises:
            StateError: when nothing matches, or the id prefix is ambiguous.
        """
        node = ""
        if pid is None:
            key, want = ("actor", actor_id) if actor_id else ("task", task_id)
            if not want:
                raise StateError("give a pid, an actor id or a task id")
            want = want.lower()
            matches = {
                (e.get("pid"), e.get("node", ""))
                for e in self.task_events()
                if e.get("kind") == "task" and str(e.get(key) or "").startswith(want)
            }
            if not matches:
                raise StateError(
                    f"no finished {'actor call' if key == 'actor' else 'task'} with id {want!r} "
                    "in the task events: check the id with `rayfield list "
                    f"{'actors' if key == 'actor' else 'tasks'}`"
                )
            if len(matches) > 1:
                raise StateError(f"{want!r} matches {len(matches)} processes: give more of the id")
            pid, node = matches.pop()
        name = f"worker-{pid}.out"
        if node:
            return node, name
        for f in self.logs():
            if f["name"] == name:
                return str(f["node"]), name
        raise StateError(f"no node has a log for pid {pid}: see `rayfield logs --list`")

    def read_log(
        self, node: str, name: str, offset: int = 0, max_bytes: int = 1 << 20
    ) -> dict[str, Any]:
        """Bytes of log ``name`` on the node at ``node`` (an address, id prefix or host)."""
        address = node if node.count(":") == 1 and node.split(":")[1].isdigit() else None
        if address is None:
            address = self.resolve_node(node).address
        return self.node(address).read_log(name, offset, max_bytes, self.node_timeout_s)

    @staticmethod
    def worker_pid(log_name: str) -> int | None:
        """The pid in a worker log's name (``worker-<pid>.out``), else None."""
        m = _WORKER_LOG.match(log_name)
        return int(m.group(1)) if m else None


def kill_actor_elsewhere(actor_id: bytes, no_restart: bool) -> bool:
    """``rayfield.kill`` of an actor this process's node does not host: ask the cluster.

    The cluster is the one this driver joined (``init(address=...)``) or, in a worker, its
    node's (``RAYFIELD_GCS_ADDRESS``, with the token in ``RAYFIELD_TOKEN``). False when
    this process is not in a cluster or no node hosts the actor.
    """
    from rayfield._private.context import gcs_address, sessions_root

    address = gcs_address()
    if not address:
        return False
    with StateClient(address, temp_dir=sessions_root()) as client:
        return client.kill_actor(actor_id, no_restart)
