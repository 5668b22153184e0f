"""A node started by ``rayfield.init()``: the native core, a worker pool, worker logs.

The node runs inside the driver's process: the native core (object store, scheduler and
event loop, all in C++ threads) plus one Python thread that acts on its events (start a
worker when work lacks one, warn about infeasible work) and one that streams worker
output to the driver with a ``(pid=..., ip=...)`` prefix. Workers are the only other
processes. ``shutdown()`` stops them, the native core, and removes the socket.
"""

from __future__ import annotations

import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rayfield._private.common import session_files
from rayfield._private.common.actor_scope import NO_HANDLE_LEFT, ActorScopes
from rayfield._private.common.ids import origin_of
from rayfield._private.memory_monitor import MemoryMonitor
from rayfield.store import NodeServer

logger = logging.getLogger("rayfield")


class WorkerPool:
    """Starts worker processes on demand, up to a cap, and streams their output."""

    def __init__(self, socket_path: str, logs_dir: Path, cap: int, log_to_driver: bool) -> None:
        self.socket_path = socket_path
        self.logs_dir = logs_dir
        self.cap = cap
        self.log_to_driver = log_to_driver
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.starting = 0
        self.lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._logs = threading.Thread(target=self._stream_logs, daemon=True, name="rayfield-logs")
        self._logs.start()

    def start(self, n: int) -> None:
        with self.lock:
            alive = sum(1 for p in self.procs.values() if p.poll() is None)
            n = min(n, self.cap - alive)
        # Workers import what the driver can: its sys.path (the script's folder included).
        paths = [os.path.abspath(p or os.getcwd()) for p in sys.path]
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isdir(p))),
            RAYFIELD_LOGS_DIR=str(self.logs_dir),
        )
        for _ in range(max(0, n)):
            proc = subprocess.Popen(
                [sys.executable, "-m", "rayfield._private.runtime.worker_main", self.socket_path],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a Ctrl-C in the driver's terminal is the driver's
                umask=0o077,  # the files it writes (events, spill) are the user's alone
            )
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            with self.lock:
                self.procs[proc.pid] = proc
                self.starting += 1
            self.selector.register(proc.stdout, selectors.EVENT_READ, proc.pid)

    def registered(self) -> None:
        with self.lock:
            self.starting = max(0, self.starting - 1)

    def _stream_logs(self) -> None:
        files: dict[int, Any] = {}
        while not self._stop.is_set():
            if not self.selector.get_map():
                time.sleep(0.05)
                continue
            for key, _ in self.selector.select(timeout=0.2):
                pid = key.data
                try:
                    data = os.read(key.fd, 65536)
                except (BlockingIOError, OSError):
                    data = b""
                if not data:
                    self.selector.unregister(key.fileobj)
                    f = files.pop(pid, None)
                    if f is not None:
                        f.close()
                    continue
                if pid not in files:
                    files[pid] = session_files.open_private(self.logs_dir / f"worker-{pid}.out")
                files[pid].write(data)
                files[pid].flush()
                if self.log_to_driver:
                    text = data.decode(errors="replace")
                    lines = [f"(pid={pid}, ip=127.0.0.1) {line}" for line in text.splitlines()]
                    sys.stdout.write("\n".join(lines) + "\n")
                    sys.stdout.flush()
        for f in files.values():
            f.close()

    def stop(self) -> None:
        with self.lock:
            procs = list(self.procs.values())
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3
        for p in procs:
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        time.sleep(0.05)  # let the log thread read the last output
        self._stop.set()
        self._logs.join(timeout=2)
        for p in procs:
            if p.stdout is not None:
                p.stdout.close()
        self.selector.close()


class LocalNode:
    """The embedded head: native core, worker pool and event handling in this process."""

    def __init__(
        self,
        session_dir: Path,
        resources: dict[str, float],
        object_store_memory: int,
        plasma_directory: str | None,
        huge_pages: bool,
        log_to_driver: bool,
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
            prefault=False,  # pages are mapped as objects are created
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
        )
        self.pool.start(num_cpus)  # warm pool
        self.memory_monitor = MemoryMonitor.from_env(self.server)  # kills workers near OOM
        self.memory_monitor.start()
        self.warned: set[bytes] = set()
        self.agent: Any = None  # a cluster.agent.NodeAgent when the node is part of a cluster
        home = origin_of(self.server.node_id)  # ids made by this node's processes start so
        self.scopes = ActorScopes(lambda actor_id: origin_of(actor_id) == home)
        self._stop = threading.Event()
        self._events = threading.Thread(
            target=self._handle_events, daemon=True, name="rayfield-node"
        )
        self._events.start()

    def _handle_events(self) -> None:
        while not self._stop.is_set():
            for event in self.server.poll_events(timeout_s=0.2):
                kind = event[0]
                if kind == "need_worker":
                    with self.pool.lock:
                        starting = self.pool.starting
                    if starting < event[2]:
                        self.pool.start(event[2] - starting)
                elif kind == "worker_registered":
                    self.pool.registered()
                elif kind == "actor_handles":
                    self._handles_changed(event[1], event[2], event[3])
                elif kind == "actor_state" and self.agent is not None:
                    self.agent.lifecycle.actor_state(event[1], event[2])
                elif kind == "actor_died" and self.agent is not None:
                    self.agent.lifecycle.actor_died(event[1], event[2])
                elif kind == "client_disconnected" and event[3] and self.agent is not None:
                    self.agent.lifecycle.driver_gone(event[2])
                elif kind == "owner_died" and self.agent is not None:
                    self.agent.lifecycle.owner_died(event[2], event[3])
                elif kind == "cancel_elsewhere" and self.agent is not None:
                    self.agent.lifecycle.cancel_forwarded(event[1], event[2])
                elif kind == "actor_task_elsewhere" and self.agent is not None:
                    self.agent.on_actor_task_elsewhere(event[1], event[2])
                elif kind == "object_missing" and self.agent is not None:
                    self.agent.on_object_missing(event[1], event[2])
                elif kind == "missing_dependencies" and self.agent is not None:
                    for object_id in event[2]:  # arguments that may live on another node
                        self.agent.on_object_missing(object_id, -1)
                elif (
                    kind == "task_infeasible"
                    and self.agent is not None
                    and self.agent.spill(event[1], event[2])
                ):
                    continue  # forwarded to a node that fits it
                elif kind == "task_infeasible" and event[1] not in self.warned:
                    self.warned.add(event[1])
                    logger.warning(
                        "a task cannot be scheduled: %s. It waits until a node with these "
                        "resources joins.",
                        event[3],
                    )
                elif kind == "store_full":
                    logger.warning(
                        "object store full, spilling did not make room: %d bytes requested, "
                        "%d of %d in use",
                        event[1],
                        event[3],
                        event[2],
                    )

    def _handles_changed(self, actor_id: bytes, held: bool, scoped: bool) -> None:
        """This node's count of handles to an actor changed; alone, a node ends an actor
        that lost its last handle itself; in a cluster its agent asks the others first."""
        if self.agent is not None:
            self.agent.lifecycle.handles_changed(actor_id, held, scoped)
            return
        for what, aid in self.scopes.local(actor_id, held, scoped):
            ended = what == "confirm" and self.scopes.confirmed(aid, False)
            if ended and self.server.end_actor(aid, NO_HANDLE_LEFT) == "held":
                self.scopes.end_refused(aid)

    def shutdown(self) -> None:
        if self.agent is not None:
            self.agent.shutdown()
        self._stop.set()
        self._events.join(timeout=2)
        self.memory_monitor.stop()
        self.pool.stop()
        self.server.stop()
        shutil.rmtree(self.session_dir / "sockets", ignore_errors=True)
        shutil.rmtree(self.sockets_dir, ignore_errors=True)
