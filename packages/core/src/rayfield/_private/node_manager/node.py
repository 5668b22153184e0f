"""The node: the native core, its worker pool, and the thread acting on its events.

Every node is a :class:`Node`: ``rayfield.init()`` without an address hosts one in the
driver's process, and ``rayfield start`` hosts one in its own process (``node_main.py``),
which also joins it to a cluster (an agent, ``agent.py``). A node is the native core
(object store, scheduler and event loop, all in C++ threads), a :class:`WorkerPool`
(``worker_pool.py``), a memory monitor, and one Python thread that reads the core's events
(``events.py``): it starts workers when work lacks one, warns about infeasible work and a
full store, ends actors that lost their last handle, and hands the other events to the
node's agent when it has one. ``shutdown()`` stops the agent, the workers, the native
core, and removes the socket.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rayfield._private.common import scheduling, session_files
from rayfield._private.common.actor_scope import NO_HANDLE_LEFT, ActorScopes
from rayfield._private.common.ids import origin_of
from rayfield._private.common.placement_groups import is_group_resource
from rayfield._private.node_manager import events as ev
from rayfield._private.node_manager.local_groups import LocalGroups
from rayfield._private.node_manager.memory_monitor import MemoryMonitor
from rayfield._private.node_manager.placement import NodeSlot, place_strategy

if TYPE_CHECKING:
    from rayfield._private.node_manager.runtime_envs import RuntimeEnvs
from rayfield._private.node_manager.worker_pool import WorkerPool
from rayfield.store import NodeServer

__all__ = ["ClusterAgent", "Node", "WorkerPool"]

logger = logging.getLogger("rayfield")
# The most bytes of its store a node keeps populated ahead of the next large object
# (``NodeServer(warm_ahead_bytes=...)``; an eighth of a smaller store).
WARM_AHEAD_MAX_BYTES = 256 << 20
ENV_WARM_AHEAD = "RAYFIELD_STORE_WARM_AHEAD"  # bytes instead of that default; 0: none


def warm_ahead_bytes(object_store_memory: int) -> int:
    """How many bytes of its store a node populates ahead of the next large object:
    ``$RAYFIELD_STORE_WARM_AHEAD`` when set, else an eighth of the store up to
    ``WARM_AHEAD_MAX_BYTES``.

    Raises:
        ValueError: ``$RAYFIELD_STORE_WARM_AHEAD`` is not a whole number of bytes >= 0.
    """
    raw = os.environ.get(ENV_WARM_AHEAD, "").strip()
    if not raw:
        return min(object_store_memory // 8, WARM_AHEAD_MAX_BYTES)
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{ENV_WARM_AHEAD} must be a whole number of bytes >= 0, not {raw!r}")
    return value


class ClusterAgent(Protocol):
    """What a node in a cluster hands its events to (``agent.NodeAgent``)."""

    address: str

    def on_event(self, event: ev.NodeEvent) -> bool:
        """Act on a cluster event; True when it was handled (an infeasible task that was
        forwarded elsewhere), False when the node acts on it alone."""
        ...

    def shutdown(self) -> None:
        """Leave the cluster and stop the agent's threads."""
        ...


class Node:
    """A node in this process: native core, worker pool and the thread acting on its events.

    Args:
        session_dir: the session's directory (logs, sockets, spill files go under it).
        resources: the node's total resources, e.g. ``{"CPU": 4.0}``.
        object_store_memory: bytes of shared memory for the object store.
        plasma_directory: where the store's memory file lives (None: the default).
        huge_pages: back the store with huge pages.
        log_to_driver: copy worker output to this process's stdout.
        worker_preload_modules: modules a fork server imports once for every worker
            (``WorkerPool``; empty: each worker is a fresh interpreter).
    """

    def __init__(
        self,
        session_dir: Path,
        resources: dict[str, float],
        object_store_memory: int,
        plasma_directory: str | None,
        huge_pages: bool,
        log_to_driver: bool,
        worker_preload_modules: Sequence[str] = (),
    ) -> None:
        self.session_dir = session_dir
        self.resources = resources
        session_files.private_dir(session_dir / "logs")
        self.sockets_dir = session_files.private_dir(session_dir / "sockets")
        if len(str(self.sockets_dir / "node.sock")) > 100:  # Unix socket paths hold 107 bytes
            self.sockets_dir = Path(tempfile.mkdtemp(prefix="rayfield-"))
        self.socket_path = str(self.sockets_dir / "node.sock")
        self.server = NodeServer(
            self.socket_path,
            object_store_memory,
            plasma_directory=plasma_directory,
            huge_pages=huge_pages,
            prefault=False,  # pages are mapped as objects are created...
            # ...and, once large objects come, populated ahead of them on a low-priority
            # thread (a pulled 200 MB object otherwise waits ~0.1-0.3 s for fresh pages)
            warm_ahead_bytes=warm_ahead_bytes(object_store_memory),
            resources=resources,
            spill_directory=session_dir / "spill",  # referenced objects past the store's size
        )
        self.server.start()
        num_cpus = max(1, int(resources.get("CPU", 1)))
        self.pool = WorkerPool(
            self.socket_path,
            session_dir / "logs",
            cap=4 * num_cpus + 64,
            log_to_driver=log_to_driver,
            node_gpus=resources.get("GPU", 0.0),
            preload_modules=worker_preload_modules,
        )
        self.pool.start(num_cpus)  # warm pool
        self.memory_monitor = MemoryMonitor.from_env(self.server)  # kills workers near OOM
        self.memory_monitor.start()
        self.warned: set[bytes] = set()
        self.agent: ClusterAgent | None = None  # set by node_main when the node joins a cluster
        self.runtime_envs: RuntimeEnvs | None = None  # made on the first non-default env

        self.metrics_exporter: Any = None  # its /metrics server, when it serves one
        self._groups: LocalGroups | None = None  # placement groups, without a cluster
        self._groups_lock = threading.Lock()
        home = origin_of(self.server.node_id)  # ids made by this node's processes start so
        self.scopes = ActorScopes(lambda actor_id: origin_of(actor_id) == home)
        self._stop = threading.Event()
        self._events = threading.Thread(
            target=self._handle_events, daemon=True, name="rayfield-node"
        )
        self._events.start()

    def placement_groups(self) -> LocalGroups:
        """The placement group table of this node alone (made on first use)."""
        with self._groups_lock:
            if self._groups is None:
                self._groups = LocalGroups(self.server)
            return self._groups

    def _handle_events(self) -> None:
        while not self._stop.is_set():
            for raw in self.server.poll_events(timeout_s=0.2):
                event = ev.from_native(raw)
                if event is not None:
                    self._handle(event)

    def _handle(self, event: ev.NodeEvent) -> None:
        if isinstance(event, ev.NeedWorker) and event.runtime_env:
            self._need_env_workers(event)
        elif isinstance(event, ev.NeedWorker):
            with self.pool.lock:
                starting = self.pool.starting
            if starting < event.num_waiting:
                self.pool.start(event.num_waiting - starting)
        elif isinstance(event, ev.WorkerRegistered):
            self.pool.registered(event.pid)
        elif isinstance(event, ev.StoreFull):
            logger.warning(
                "object store full, spilling did not make room: %d bytes requested, "
                "%d of %d in use",
                event.requested_bytes,
                event.used_bytes,
                event.capacity_bytes,
            )
        elif self.agent is not None and self.agent.on_event(event):
            return
        elif isinstance(event, ev.ActorHandlesChanged):
            self._handles_changed(event)
        elif isinstance(event, ev.TaskPlacement):
            self._place_alone(event)
        elif isinstance(event, ev.TaskInfeasible) and event.task_id not in self.warned:
            if any(is_group_resource(name) for name in event.demand):
                return  # it waits for its placement group, which reports why

            self.warned.add(event.task_id)
            logger.warning(
                "a task cannot be scheduled: %s. It waits until a node with these resources joins.",
                event.reason,
            )

    def _need_env_workers(self, event: ev.NeedWorker) -> None:
        """Start workers for tasks of a runtime_env other than the default, its setup
        first (``runtime_envs.py``; made on the first such request)."""
        if self.runtime_envs is None:
            from rayfield._private.node_manager.runtime_envs import RuntimeEnvs

            self.runtime_envs = RuntimeEnvs(self.session_dir.parent / "runtime_resources")
        with self.pool.lock:
            starting = self.pool.starting_env.get(event.runtime_env, 0)
        if starting < event.num_waiting:
            self.runtime_envs.start_workers(
                self.pool, event.runtime_env, event.num_waiting - starting
            )

    def _place_alone(self, event: ev.TaskPlacement) -> None:
        """Place a task with a scheduling strategy on a node without a cluster: here, or
        nowhere (a hard affinity to another node)."""
        snap = self.server.scheduler_snapshot()
        here = NodeSlot(self.server.node_id, dict(snap["total"]), dict(snap["available"]))
        decided = place_strategy(scheduling.decode(event.scheduling), event.demand, here, [])
        if decided.action == "fail":
            why = scheduling.unschedulable(decided.message, event.actor)
            self.server.place_task(event.task_id, fail=why)
        else:
            self.server.place_task(event.task_id)

    def _handles_changed(self, event: ev.ActorHandlesChanged) -> None:
        """This node's count of handles to an actor changed, and the node is alone: it
        ends an actor that lost its last handle itself."""
        for what, aid in self.scopes.local(event.actor_id, event.held, event.scoped):
            ended = what == "confirm" and self.scopes.confirmed(aid, False)
            if ended and self.server.end_actor(aid, NO_HANDLE_LEFT) == "held":
                self.scopes.end_refused(aid)

    def export_metrics(
        self, port: int, host: str = "127.0.0.1", gcs: Any = None, head: bool = True
    ) -> str:
        """Serve this node's Prometheus ``/metrics`` on ``host:port`` (0: a free port) until
        :meth:`shutdown`; returns ``HOST:PORT`` (``metrics_exporter.py``)."""
        from rayfield._private.node_manager.metrics_exporter import MetricsExporter

        self.metrics_exporter = MetricsExporter(self, host, port, gcs, head)
        return str(self.metrics_exporter.address)

    def shutdown(self) -> None:
        """Stop the agent, the workers and the native core. The event thread is told
        first (it notices within 0.2 s) and joined after the workers stopped; the events
        of stopping workers are not acted on (no worker is started to replace them)."""
        self._stop.set()
        if self.metrics_exporter is not None:
            self.metrics_exporter.stop()
        if self.agent is not None:
            self.agent.shutdown()
        self.memory_monitor.stop()
        if self.runtime_envs is not None:
            self.runtime_envs.stop()
        if self._groups is not None:
            self._groups.stop()
        self.pool.stop()
        self._events.join(timeout=2)
        self.server.stop()
        shutil.rmtree(self.session_dir / "sockets", ignore_errors=True)
        shutil.rmtree(self.sockets_dir, ignore_errors=True)
