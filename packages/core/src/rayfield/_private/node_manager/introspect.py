"""What a node is doing, for ``rayfield list|memory|logs`` and the dashboard.

A node answers three calls of its ``/rayfield.Node`` service from here:

* ``Introspect``: machine load (CPU, memory), object store usage, resources, queue
  lengths, its worker processes (state, CPU, resident memory), the tasks running on
  them and, when asked, the objects in its store with their owner and why they are held.
* ``ListLogs``: the files of the node's ``<session>/logs`` directory.
* ``ReadLog``: a byte range (or the tail) of one of those files. Only bare file names of
  that directory are served: no paths, no links out of it.

Messages are the ``NodeIntrospect*``, ``ListLogsReply`` and ``ReadLog*`` tables of
``schema/cluster.fbs``, encoded by ``rayfield._private.protocol.codec``.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from rayfield._private.node_manager.node import Node

MAX_LOG_READ = 4 << 20  # bytes one ReadLog answers at most


class LogAccessError(ValueError):
    """A log name that is not a plain file of the node's logs directory."""


class Introspector:
    """Answers the introspection calls for ``node`` (reachable at ``address``)."""

    def __init__(self, node: Node, address: str) -> None:
        self.node = node
        self.address = address
        self.logs_dir = (Path(node.session_dir) / "logs").resolve()
        self._procs: dict[int, psutil.Process] = {}  # kept: cpu_percent measures between calls
        self._lock = threading.Lock()
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement

    def _process(self, pid: int) -> psutil.Process | None:
        with self._lock:
            proc = self._procs.get(pid)
            if proc is None:
                try:
                    proc = self._procs[pid] = psutil.Process(pid)
                    proc.cpu_percent(interval=None)
                except psutil.Error:
                    return None
            return proc

    def workers(self, running: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One dict per live worker process: pid, state, cpu_percent, rss_bytes, started_s."""
        busy = {t["pid"]: ("actor" if t["actor_task"] else "busy") for t in running}
        with self.node.pool.lock:
            pids = [pid for pid, p in self.node.pool.procs.items() if p.poll() is None]
        out = []
        for pid in sorted(pids):
            proc = self._process(pid)
            if proc is None:
                continue
            try:
                with proc.oneshot():
                    cpu, rss, started = (
                        proc.cpu_percent(None),
                        proc.memory_info().rss,
                        proc.create_time(),
                    )
            except psutil.Error:
                continue
            out.append(
                {
                    "pid": pid,
                    "state": busy.get(pid, "idle"),
                    "cpu_percent": cpu,
                    "rss_bytes": rss,
                    "started_s": started,
                }
            )
        with self._lock:  # forget processes that are gone
            for pid in set(self._procs) - set(pids):
                del self._procs[pid]
        return out

    def introspect(self, objects: bool = False, max_objects: int = 0) -> dict[str, Any]:
        """The ``NodeIntrospectReply`` fields as a dict (see the module docstring)."""
        server = self.node.server
        snap = server.scheduler_snapshot()
        stats = server.stats()
        running = server.running_tasks()
        mem = psutil.virtual_memory()
        reply: dict[str, Any] = {
            "node_id": server.node_id,
            "address": self.address,
            "hostname": socket.gethostname(),
            "session_dir": str(self.node.session_dir),
            "cpu_percent": psutil.cpu_percent(interval=None),
            "memory_used": mem.total - mem.available,
            "memory_total": mem.total,
            "store_capacity": stats["capacity_bytes"],
            "store_used": stats["used_bytes"],
            "num_objects": stats["num_objects"],
            "num_spilled": stats.get("num_spilled", 0),
            "spilled_bytes": stats.get("spilled_bytes", 0),
            "resources_total": snap["total"],
            "resources_available": snap["available"],
            "tasks_queued": sum(n for _, n in snap["ready_by_shape"]),
            "tasks_waiting": snap["waiting_for_dependencies"],
            "tasks_infeasible": len(snap["infeasible"]),
            "actor_tasks_queued": snap.get("actor_tasks_queued", 0),
            "workers": self.workers(running),
            "running": [
                {"task_id": t["task_id"], "pid": t["pid"], "actor_task": t["actor_task"]}
                for t in running
            ],
            "objects": [],
        }
        if objects:
            listed = sorted(
                server.list_objects(),
                key=lambda o: o["data_size"] + o["metadata_size"],
                reverse=True,
            )
            if max_objects > 0:
                listed = listed[:max_objects]
            reply["objects"] = [
                {
                    "object_id": o["object_id"],
                    "data_size": o["data_size"],
                    "metadata_size": o["metadata_size"],
                    "sealed": o["state"] == "sealed",
                    "ref_count": o["ref_count"],
                    "pin_count": o.get("pin_count", 0),
                    "buffer_count": o.get("buffer_count", 0),
                    "owner_pid": o.get("owner_pid", 0),
                    "spilled": o.get("spilled", False),
                    "create_time_ms": o["create_time_ms"],
                }
                for o in listed
            ]
        return reply

    def list_logs(self) -> list[dict[str, Any]]:
        """The files of the logs directory: name, size (bytes), mtime_s."""
        out = []
        with os.scandir(self.logs_dir) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                out.append({"name": entry.name, "size": st.st_size, "mtime_s": st.st_mtime})
        return sorted(out, key=lambda f: f["name"])

    def _log_path(self, name: str) -> Path:
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise LogAccessError(f"{name!r} is not a log file name: give a bare file name")
        path = self.logs_dir / name
        if path.is_symlink() or path.resolve().parent != self.logs_dir:
            raise LogAccessError(f"{name!r} is not a file of the node's logs directory")
        return path

    def read_log(self, name: str, offset: int, max_bytes: int) -> dict[str, Any]:
        """Bytes of log ``name`` from ``offset`` (negative: from the end), at most
        ``max_bytes`` (capped at 4 MiB).

        Raises:
            LogAccessError: when ``name`` is not a bare name of a file in the logs directory.
        """
        path = self._log_path(name)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start = max(0, size + offset) if offset < 0 else min(offset, size)
                f.seek(start)
                data = f.read(min(max(0, max_bytes) or MAX_LOG_READ, MAX_LOG_READ))
        except FileNotFoundError:
            return {"found": False, "size": 0, "offset": 0, "data": b""}
        return {"found": True, "size": size, "offset": start, "data": data}
