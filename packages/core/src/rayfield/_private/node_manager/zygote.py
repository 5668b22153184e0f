"""The worker pool's side of the fork server (``runtime/zygote_main.py``, the protocol is
described there): starting it, asking it for a worker, and the handle of a forked worker.

A forked worker is the zygote's child, not this process's: :class:`ForkedWorker` follows it
through a pidfd (signals go to that process even after its pid is reused) and offers the
part of ``subprocess.Popen`` the pool uses. Its exit status is the zygote's to collect, so
:meth:`ForkedWorker.poll` says only whether it has exited.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rayfield._private.common import session_files

# Each worker (and the zygote) leads a process group of its own inside the node's session:
# a Ctrl-C in the driver's terminal (SIGINT to the terminal's foreground group) is the
# driver's alone, and the node's workers share its session, hence one CPU autogroup under
# sched_autogroup.
OWN_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)

__all__ = ["EXITED", "ForkedWorker", "Zygote", "ZygoteError"]

# What ForkedWorker.poll() returns once the worker has exited (its status is unknown here).
EXITED = -255
# The longest one select on a worker's pidfd holds its lock.
WAIT_SLICE_S = 0.05
_REPLY_TIMEOUT_S = 10.0


class ZygoteError(Exception):
    """The zygote exited, did not answer in time, or refused a request."""


class ForkedWorker:
    """A worker forked by the zygote: its pid, its output pipe and a pidfd.

    Args:
        pid: the worker's process id.
        pidfd: a pidfd of it (owned: closed once the worker is seen to have exited).
        stdout: the read end of its log pipe (stdout and stderr).
    """

    def __init__(self, pid: int, pidfd: int, stdout: IO[bytes]) -> None:
        self.pid = pid
        self._pidfd: int | None = pidfd
        self.stdout = stdout
        self.returncode: int | None = None
        # Held while the pidfd is used or closed: the pool's threads poll, wait and signal
        # the same worker, and a pidfd closed under another thread's select would be EBADF
        # (or, reused, another file).
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """None while the worker runs, else :data:`EXITED`."""
        with self._lock:
            self._check(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the worker exits.

        Raises:
            subprocess.TimeoutExpired: it still runs after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            with self._lock:
                if self._check(max(0.0, min(left, WAIT_SLICE_S))):
                    return EXITED
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the worker; nothing once it has exited."""
        with self._lock:
            if self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, sig)
                except ProcessLookupError:
                    pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _check(self, timeout: float) -> bool:
        """Whether the worker has exited, waiting up to ``timeout`` seconds (lock held)."""
        if self._pidfd is not None and select.select([self._pidfd], [], [], timeout)[0]:
            os.close(self._pidfd)
            self._pidfd = None
            self.returncode = EXITED
        return self.returncode is not None


class Zygote:
    """The fork server of one worker pool: started at once, it imports in the background.

    Args:
        modules: the preload modules (besides the worker's own).
        socket_path: the node's socket (on the zygote's command line, for ``ps``).
        logs_dir: where ``zygote.out`` (the zygote's own output) is written.
        env: the zygote's environment (a fresh worker's, as the pool makes it).
    """

    def __init__(
        self, modules: Sequence[str], socket_path: str, logs_dir: Path, env: dict[str, str]
    ) -> None:
        self.modules = tuple(modules)
        self.log_path = logs_dir / "zygote.out"
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with session_files.open_private(self.log_path) as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rayfield._private.runtime.zygote_main",
                    str(theirs.fileno()),
                    ",".join(self.modules),
                    socket_path,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                pass_fds=(theirs.fileno(),),
                **OWN_GROUP,
                umask=0o077,
            )
        theirs.close()

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the zygote's ready message (``{"failed": {module: error}, ...}``).

        Raises:
            ZygoteError: it exited, sent nothing within ``timeout_s`` seconds, or cannot
                fork (an import initialised CUDA).
        """
        reply, fds = self._receive(timeout_s, "get ready")
        for fd in fds:
            os.close(fd)
        if not reply.get("ready"):
            raise ZygoteError(f"the zygote cannot fork workers: {reply.get('error', reply)}")
        return reply

    def fork(self, env: dict[str, str], cwd: str, socket_path: str) -> ForkedWorker:
        """Fork a worker that runs against ``socket_path`` with ``env`` in ``cwd``.

        Raises:
            ZygoteError: the zygote is gone, did not answer within 10 s, or refused.
        """
        read_end, write_end = os.pipe()
        try:
            payload = json.dumps({"env": env, "cwd": cwd, "socket": socket_path}).encode()
            try:
                socket.send_fds(self._sock, [payload], [write_end])
            except OSError as exc:
                raise ZygoteError(f"the zygote is gone ({exc})") from exc
            finally:
                os.close(write_end)
            reply, fds = self._receive(_REPLY_TIMEOUT_S, "fork a worker")
            if "error" in reply or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise ZygoteError(f"the zygote could not fork a worker: {reply.get('error')}")
        except BaseException:
            os.close(read_end)
            raise
        os.set_blocking(read_end, False)
        return ForkedWorker(int(reply["pid"]), fds[0], open(read_end, "rb", buffering=0))

    def _receive(self, timeout_s: float, doing: str) -> tuple[dict[str, Any], list[int]]:
        self._sock.settimeout(max(0.001, timeout_s))
        try:
            data, fds, _flags, _addr = socket.recv_fds(self._sock, 65536, 1)
        except TimeoutError:
            raise ZygoteError(f"the zygote did not {doing} within {timeout_s:.0f} s") from None
        except OSError as exc:
            raise ZygoteError(f"the zygote is gone ({exc})") from exc
        if not data:
            raise ZygoteError(f"the zygote exited; its output is in {self.log_path}")
        return json.loads(data), fds

    def close(self) -> None:
        """Shut the socket down (the zygote then exits, its workers go on; a request in
        flight fails) and end the zygote: SIGKILL when it has not exited within 2 s."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
