"""The worker fork server ("zygote") of a node with worker preload modules.

Started by the worker pool as ``python -m rayfield._private.runtime.zygote_main FD MODULES
SOCKET`` (``FD``: its end of a ``SOCK_SEQPACKET`` socket pair with the pool; ``MODULES``:
comma-separated names; ``SOCKET``: the node's socket, for ``ps``). It imports the worker's
modules (``worker_main``) and ``MODULES`` once, sends ``{"ready": true, "failed": {name:
error}, "threads": n}`` (``{"ready": false, "error": ...}`` and exits when an import
initialised CUDA, which a forked child could not use), then serves one request at a time:

- request: ``{"env": {...}, "cwd": str, "socket": str}`` with one file descriptor, the write
  end of the worker's log pipe;
- reply: ``{"pid": int}`` with one file descriptor, a pidfd of the new worker (opened before
  the worker can be reaped, so it names that process and no other), or ``{"error": str}``.

The forked child becomes a worker as a fresh one would start: a process group of its own in
the node's session, umask 077, stdout and stderr on the log pipe, the request's environment,
working directory and module search path, Python's, numpy's and torch's random generators
seeded anew, and then ``worker_main.main()``. The zygote reaps its children (``SIGCHLD``)
and exits when the pool closes its socket. It forks only while it runs no Python thread
besides its main one; native thread pools (OpenBLAS's, imported with numpy) shut down around
``fork`` themselves.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

MAX_REQUEST_BYTES = 1 << 20  # one fork request on the zygote socket


def _reap(*_: Any) -> None:
    """Collect every child that has exited (the SIGCHLD handler)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], fds or [])


def serve(sock: socket.socket) -> tuple[dict[str, Any], int] | None:
    """Fork a worker per request until the pool closes ``sock``.

    Returns None in the zygote (the pool closed the socket), and ``(request, log_fd)`` in a
    forked child, which is to become the worker.
    """
    chld = {signal.SIGCHLD}
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST_BYTES, 1)
        except OSError:
            return None
        if not data:
            for fd in fds:
                os.close(fd)
            return None
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": "a request carries exactly one file descriptor (the log pipe)"})
            continue
        request = json.loads(data)
        if threading.active_count() > 1:
            os.close(fds[0])
            names = [t.name for t in threading.enumerate()]
            _send(sock, {"error": f"the zygote runs Python threads {names}: it cannot fork"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        # Blocked from fork until the pidfd is open, so the child cannot be reaped first.
        signal.pthread_sigmask(signal.SIG_BLOCK, chld)
        try:
            pid = os.fork()
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, chld)
            os.close(fds[0])
            _send(sock, {"error": f"fork failed: {exc}"})
            continue
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, chld)
            sock.close()
            return request, fds[0]
        os.close(fds[0])
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, chld)
            os.kill(pid, signal.SIGKILL)
            _send(sock, {"error": f"pidfd_open failed: {exc}"})
            continue
        signal.pthread_sigmask(signal.SIG_UNBLOCK, chld)
        try:
            _send(sock, {"pid": pid}, [pidfd])
        finally:
            os.close(pidfd)


def become_worker(request: dict[str, Any], log_fd: int) -> None:
    """In a forked child: set up the process as the pool would start a fresh worker."""
    from rayfield._private.common.preload import merge_sys_path
    from rayfield._private.runtime import gpus

    os.setpgid(0, 0)  # a group of its own in the node's session, as a spawned worker
    os.umask(0o077)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    if log_fd > 2:
        os.close(log_fd)
    env: dict[str, str] = request["env"]
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = merge_sys_path(sys.path, env.get("PYTHONPATH", ""))
    try:
        os.chdir(request["cwd"])
    except OSError:
        pass  # as a fresh worker would: the node's directory is gone, it runs elsewhere
    gpus.NODE_VISIBLE_DEVICES = gpus.visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    reseed()
    sys.argv = [sys.argv[0], request["socket"]]


def reseed() -> None:
    """Seed the random generators a fresh process seeds from the OS: Python's (again; it
    also does so at fork), numpy's global one and torch's default one, when imported."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    modules = [m for m in sys.argv[2].split(",") if m] if len(sys.argv) > 2 else []
    from rayfield._private.runtime import worker_main  # the worker's own modules

    failed: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # a module that fails is imported by each worker instead
            failed[name] = f"{type(exc).__name__}: {exc}"
    from rayfield._private.runtime import gpus

    if gpus.cuda_initialized():  # a forked child cannot use a CUDA its parent initialised
        _send(sock, {"ready": False, "error": "a preloaded module initialised CUDA"})
        return
    _send(sock, {"ready": True, "failed": failed, "threads": _native_threads()})
    served = serve(sock)
    if served is None:
        return
    become_worker(*served)
    worker_main.main()


if __name__ == "__main__":
    main()
