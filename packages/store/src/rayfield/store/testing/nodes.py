"""Native nodes for tests: in this process (local_node) or in a child (node_process)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def _socket_dir(directory: str | os.PathLike[str] | None) -> Iterator[str]:
    """``directory``, or a short temporary one (Unix socket paths hold 107 bytes at most)."""
    if directory is not None and len(os.path.join(os.fspath(directory), "node.sock")) < 100:
        yield os.fspath(directory)
        return
    short = tempfile.mkdtemp(prefix="rf-")
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@contextlib.contextmanager
def local_node(
    directory: str | os.PathLike[str] | None, capacity_bytes: int = 64 << 20, **kwargs: Any
) -> Iterator[Any]:
    """Start a native ``NodeServer`` in this process on ``<directory>/node.sock``; stop it after.

    Args:
        directory: where the socket goes (pytest's ``tmp_path``); ``None`` or a path too
            long for a Unix socket: a fresh temporary directory, removed afterwards.
        capacity_bytes: the store's capacity in bytes.
        **kwargs: passed to ``NodeServer`` (``max_frame_bytes``, ``prefault``, ...).

    Yields:
        The running ``rayfield.store.NodeServer``.

    Example:
        >>> from rayfield.store import StoreClient
        >>> with local_node(None, 1 << 20) as node, StoreClient(node.socket_path) as c:
        ...     c.stats()["capacity_bytes"] >= 1 << 20
        True
    """
    from rayfield.store import NodeServer

    with _socket_dir(directory) as path:
        node = NodeServer(os.path.join(path, "node.sock"), capacity_bytes, **kwargs)
        node.start()
        try:
            yield node
        finally:
            node.stop()


_NODE_MAIN = """
import json, sys
from rayfield.store import NodeServer
with NodeServer(sys.argv[1], int(sys.argv[2]), **json.loads(sys.argv[3])):
    print("ready", flush=True)
    sys.stdin.read()
"""


class NodeProcess:
    """A native node running in a child process (see :func:`node_process`).

    Attributes:
        socket_path: the node's Unix socket.
        process: the ``subprocess.Popen`` of the node.
        log_path: file receiving the node's stderr.
    """

    def __init__(self, socket_path: str, process: subprocess.Popen, log_path: str) -> None:
        self.socket_path, self.process, self.log_path = socket_path, process, log_path

    def alive(self) -> bool:
        """Whether the node process is still running."""
        return self.process.poll() is None

    def log(self) -> str:
        """The node's stderr so far (native log lines, a crash's last words)."""
        with open(self.log_path, errors="replace") as f:
            return f.read()


@contextlib.contextmanager
def node_process(
    directory: str | os.PathLike[str] | None,
    capacity_bytes: int = 64 << 20,
    start_timeout_s: float = 30.0,
    **kwargs: Any,
) -> Iterator[NodeProcess]:
    """Run a native node in a child process, so that a crash fails a test and nothing more.

    Args:
        directory: as for :func:`local_node`; the node's stderr goes to ``node.log`` there.
        capacity_bytes: the store's capacity in bytes.
        start_timeout_s: how long to wait for the node to serve.
        **kwargs: JSON-serializable ``NodeServer`` arguments (``max_frame_bytes``, ...).

    Yields:
        A :class:`NodeProcess`. At exit the node is stopped (stdin closed), killed if it does
        not exit in 10 s, and reaped.

    Raises:
        RuntimeError: the node exited or did not report ready in time (its log is included).
    """
    with _socket_dir(directory) as path:
        socket_path, log_path = os.path.join(path, "node.sock"), os.path.join(path, "node.log")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        args = [sys.executable, "-c", _NODE_MAIN, socket_path, str(capacity_bytes)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*args, json.dumps(kwargs)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
        node = NodeProcess(socket_path, proc, log_path)
        try:
            assert proc.stdout is not None and proc.stdin is not None
            ready, _, _ = select.select([proc.stdout], [], [], start_timeout_s)
            if not ready or proc.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"node did not start:\n{node.log()}")
            yield node
        finally:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
