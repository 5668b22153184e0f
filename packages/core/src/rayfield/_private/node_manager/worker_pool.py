"""The worker processes of a node: started on demand, their output streamed to log files.

Workers run ``python -m rayfield._private.runtime.worker_main <socket>`` with the node's module
search path; each one's stdout and stderr go to ``<logs>/worker-<pid>.out`` and, with
``log_to_driver``, to this process's stdout with a ``(pid=..., ip=...)`` prefix. Once
:meth:`WorkerPool.stop` began no worker is started: a start that races with it (the
node's event thread asking for workers while the node stops) ends the worker it made.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rayfield._private.common import session_files

__all__ = ["WorkerPool"]

# Each worker leads a process group of its own inside the node's session: a Ctrl-C in the
# driver's terminal (SIGINT to the terminal's foreground group) is the driver's alone, and
# the node's workers share its session, hence one CPU autogroup under sched_autogroup.
_OWN_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)


class WorkerPool:
    """Starts worker processes on demand, up to a cap, and streams their output.

    Args:
        socket_path: the node's Unix socket, which workers connect to.
        logs_dir: where ``worker-<pid>.out`` files are written.
        cap: most worker processes alive at once.
        log_to_driver: also copy worker output to this process's stdout.
        node_gpus: the node's GPUs, which workers read from ``RAYFIELD_NODE_GPUS``.
    """

    def __init__(
        self,
        socket_path: str,
        logs_dir: Path,
        cap: int,
        log_to_driver: bool,
        node_gpus: float = 0,
    ) -> None:
        self.socket_path = socket_path
        self.node_gpus = node_gpus
        self.logs_dir = logs_dir
        self.cap = cap
        self.log_to_driver = log_to_driver
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.starting = 0
        self.lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._closed = False  # stop() began: start() makes no worker (under ``lock``)
        self._logs = threading.Thread(target=self._stream_logs, daemon=True, name="rayfield-logs")
        self._logs.start()

    def start(self, n: int) -> None:
        """Start ``n`` workers, fewer if the cap is reached; none once :meth:`stop` began."""
        with self.lock:
            if self._closed:
                return
            alive = sum(1 for p in self.procs.values() if p.poll() is None)
            n = min(n, self.cap - alive)
        # Workers import what the driver can: its sys.path (the script's folder included).
        paths = [os.path.abspath(p or os.getcwd()) for p in sys.path]
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isdir(p))),
            RAYFIELD_LOGS_DIR=str(self.logs_dir),
            RAYFIELD_NODE_GPUS=str(self.node_gpus),
        )
        for _ in range(max(0, n)):
            proc = subprocess.Popen(
                [sys.executable, "-m", "rayfield._private.runtime.worker_main", self.socket_path],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                **_OWN_GROUP,
                umask=0o077,  # the files it writes (events, spill) are the user's alone
            )
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            with self.lock:
                if not self._closed:  # stop() takes it with the others
                    self.procs[proc.pid] = proc
                    self.starting += 1
                    self.selector.register(proc.stdout, selectors.EVENT_READ, proc.pid)
                    continue
            proc.kill()  # stop() began while it was being started
            proc.wait()
            proc.stdout.close()
            return

    def registered(self) -> None:
        with self.lock:
            self.starting = max(0, self.starting - 1)

    def _stream_logs(self) -> None:
        """Copy worker output to the log files until :meth:`stop`; after it, until every
        stopped worker's output is read to its end (0.5 s at most)."""
        files: dict[int, Any] = {}
        drain_until = None
        while True:
            if self._stop.is_set():
                drain_until = drain_until or time.monotonic() + 0.5
                if not self.selector.get_map() or time.monotonic() > drain_until:
                    break
            elif not self.selector.get_map():
                self._stop.wait(0.05)
                continue
            for key, _ in self.selector.select(timeout=0.2 if drain_until is None else 0.05):
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
        """Stop every worker (SIGTERM, SIGKILL after 3 s) and the log thread."""
        with self.lock:
            self._closed = True
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
        self._stop.set()  # the log thread reads what the workers wrote until their EOF
        self._logs.join(timeout=2)
        for p in procs:
            if p.stdout is not None:
                p.stdout.close()
        self.selector.close()
