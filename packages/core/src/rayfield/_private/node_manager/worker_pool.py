"""The worker processes of a node: started on demand, their output streamed to log files.

Workers run ``python -m rayfield._private.runtime.worker_main <socket>`` with the node's module
search path; each one's stdout and stderr go to ``<logs>/worker-<pid>.out`` and, with
``log_to_driver``, to this process's stdout with a ``(pid=..., ip=...)`` prefix. Once
:meth:`WorkerPool.stop` began no worker is started: a start that races with it (the
node's event thread asking for workers while the node stops) ends the worker it made.

With ``preload_modules`` the pool also starts a fork server (``zygote.py``) that imports the
worker's modules and those once, and forks workers from it instead: ``start`` then only
queues the request, and the pool's ``rayfield-zygote`` thread forks the workers (waiting for
the zygote to be ready first). Should the zygote fail (exit, not answer, not get ready within
``READY_TIMEOUT_S``) the pool warns once and spawns fresh interpreters from then on.

Workers of a runtime_env other than the default are always fresh interpreters: reserved
(``reserve_env``, counted per runtime_env in ``starting_env`` until they register), then
spawned with what the env's setup returned (``spawn_env``; ``runtime_envs.py`` runs both).
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rayfield._private.common import session_files
from rayfield._private.common.preload import ZygoteState
from rayfield._private.node_manager.zygote import OWN_GROUP, ForkedWorker, Zygote, ZygoteError

__all__ = ["WorkerPool"]


logger = logging.getLogger("rayfield")

MAX_FAILED_STARTS = 20  # workers in a row that exit before registering, each replaced


class WorkerPool:
    """Starts worker processes on demand, up to a cap, and streams their output.

    Args:
        socket_path: the node's Unix socket, which workers connect to.
        logs_dir: where ``worker-<pid>.out`` files are written.
        cap: most worker processes alive at once.
        log_to_driver: also copy worker output to this process's stdout.
        node_gpus: the node's GPUs, which workers read from ``RAYFIELD_NODE_GPUS``.
        preload_modules: modules the workers' fork server imports (empty: no fork server,
            every worker is a fresh interpreter).
    """

    def __init__(
        self,
        socket_path: str,
        logs_dir: Path,
        cap: int,
        log_to_driver: bool,
        node_gpus: float = 0,
        preload_modules: Sequence[str] = (),
    ) -> None:
        self.socket_path = socket_path
        self.node_gpus = node_gpus
        self.logs_dir = logs_dir
        self.cap = cap
        self.log_to_driver = log_to_driver
        self.procs: dict[int, subprocess.Popen[bytes] | ForkedWorker] = {}
        self.starting = 0  # asked for and not yet registered (under ``lock``)
        self._unregistered: set[int] = set()  # started, not yet registered (under ``lock``)
        self._failed_starts = 0  # workers in a row that exited before registering
        self.lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._closed = False  # stop() began: start() makes no worker (under ``lock``)
        self._logs = threading.Thread(target=self._stream_logs, daemon=True, name="rayfield-logs")
        self._logs.start()
        self._queued = 0  # workers asked for and not yet forked (under ``lock``)
        self._wake = threading.Condition(self.lock)
        # Workers of other runtime_envs: starting per env, those not spawned yet, each one's env.
        self.starting_env: dict[str, int] = {}
        self._env_pending = 0
        self._env_of: dict[int, str] = {}
        self.zygote: Zygote | None = None
        self.zygote_state = ZygoteState(preload_modules, time.monotonic())
        if preload_modules:
            self.zygote = Zygote(preload_modules, socket_path, logs_dir, self._worker_env())
            self._forker = threading.Thread(
                target=self._fork_workers, daemon=True, name="rayfield-zygote"
            )
            self._forker.start()

    def start(self, n: int) -> None:
        """Start ``n`` workers, fewer if the cap is reached; none once :meth:`stop` began.
        With a fork server that is not failed, the workers are queued for the
        ``rayfield-zygote`` thread (counted in ``starting`` at once)."""
        with self.lock:
            if self._closed:
                return
            alive = sum(1 for p in self.procs.values() if p.poll() is None) + self._queued
            n = max(0, min(n, self.cap - alive - self._env_pending))
            if n and self.zygote_state.choice(time.monotonic()) != "spawn":
                self._queued += n
                self.starting += n
                self._wake.notify()
                return
        self._warn_if_failed()
        env = self._worker_env()
        for _ in range(n):
            if not self._spawn(env, counted=False):
                return

    def reserve_env(self, runtime_env: str, n: int) -> int:
        """Count ``n`` workers of ``runtime_env`` (canonical JSON) as starting, fewer if the
        cap is reached (none once :meth:`stop` began); how many. Each is then spawned
        (:meth:`spawn_env`) or given up (:meth:`release_env`)."""
        with self.lock:
            if self._closed:
                return 0
            alive = sum(1 for p in self.procs.values() if p.poll() is None) + self._queued
            n = max(0, min(n, self.cap - alive - self._env_pending))
            if n:
                self.starting_env[runtime_env] = self.starting_env.get(runtime_env, 0) + n
                self._env_pending += n
            return n

    def spawn_env(self, runtime_env: str, overrides: dict[str, str], python: str | None) -> bool:
        """Spawn one reserved worker of ``runtime_env``: the node's worker environment with
        ``overrides`` (a ``PYTHONPATH`` there goes before the node's), running ``python``
        (None: this one); False when the pool stopped meanwhile."""
        env = self._worker_env()
        extra = dict(overrides)
        paths = extra.pop("PYTHONPATH", "")
        env.update(extra)
        if paths:
            env["PYTHONPATH"] = os.pathsep.join([paths, env["PYTHONPATH"]])
        spawned = self._spawn(env, counted=True, python=python, runtime_env=runtime_env)
        with self.lock:
            self._env_pending -= 1
            if not spawned:
                self._uncount(runtime_env, 1)
        return spawned

    def release_env(self, runtime_env: str, k: int) -> None:
        """``k`` reserved workers of ``runtime_env`` will not be spawned."""
        with self.lock:
            self._env_pending -= k
            self._uncount(runtime_env, k)

    def _uncount(self, runtime_env: str, k: int) -> None:
        """``k`` workers of ``runtime_env`` no longer start (under ``lock``)."""
        left = self.starting_env.get(runtime_env, 0) - k
        if left > 0:
            self.starting_env[runtime_env] = left
        else:
            self.starting_env.pop(runtime_env, None)

    def _worker_env(self) -> dict[str, str]:
        # Workers import what the driver can: its sys.path (the script's folder included).
        paths = [os.path.abspath(p or os.getcwd()) for p in sys.path]
        return dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isdir(p))),
            RAYFIELD_LOGS_DIR=str(self.logs_dir),
            RAYFIELD_NODE_GPUS=str(self.node_gpus),
        )

    def _spawn(
        self, env: dict[str, str], counted: bool, python: str | None = None, runtime_env: str = ""
    ) -> bool:
        """Start one fresh worker interpreter (``python``, default this one); False when
        the pool stopped meanwhile. ``counted``: it is already in ``starting`` (queued for
        the zygote) or in ``starting_env`` (a worker of ``runtime_env``)."""
        proc = subprocess.Popen(
            [
                python or sys.executable,
                "-m",
                "rayfield._private.runtime.worker_main",
                self.socket_path,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            **OWN_GROUP,
            umask=0o077,  # the files it writes (events, spill) are the user's alone
        )
        if not runtime_env:
            return self._add(proc, counted)
        with self.lock:  # (before it can register: it counts in starting_env, not starting)
            self._env_of[proc.pid] = runtime_env
        if self._add(proc, counted):
            return True
        with self.lock:
            self._env_of.pop(proc.pid, None)
        return False

    def _add(self, proc: subprocess.Popen[bytes] | ForkedWorker, counted: bool) -> bool:
        """Track a started worker and stream its output; False (and the worker ended)
        when the pool stopped meanwhile."""
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        with self.lock:
            if not self._closed:  # stop() takes it with the others
                self.procs[proc.pid] = proc
                self._unregistered.add(proc.pid)
                self.starting += 0 if counted else 1
                self.selector.register(proc.stdout, selectors.EVENT_READ, proc.pid)
                return True
        proc.kill()  # stop() began while it was being started
        proc.wait()
        proc.stdout.close()
        return False

    def _fork_workers(self) -> None:
        """The ``rayfield-zygote`` thread: wait for the zygote, then start the queued
        workers, forked while the zygote works and spawned fresh once it failed."""
        assert self.zygote is not None
        state = self.zygote_state
        try:
            ready = self.zygote.wait_ready(state.wait_left(time.monotonic()))
        except ZygoteError as exc:
            state.failed(str(exc))
            self.zygote.close()
        else:
            state.ready()
            for name, error in ready.get("failed", {}).items():
                logger.warning("worker preload: %s could not be imported (%s)", name, error)
        while True:
            with self.lock:
                while not self._queued and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                self._queued -= 1
            env = self._worker_env()
            if state.choice(time.monotonic()) == "fork":
                try:
                    proc: subprocess.Popen[bytes] | ForkedWorker | None = self.zygote.fork(
                        env, os.getcwd(), self.socket_path
                    )
                except ZygoteError as exc:
                    state.failed(str(exc))
                    proc = None
                    with self.lock:
                        if self._closed:  # stop() shut the zygote's socket
                            return
                    self.zygote.close()
                if proc is not None:
                    self._add(proc, counted=True)
                    continue
            self._warn_if_failed()
            self._spawn(env, counted=True)

    def _warn_if_failed(self) -> None:
        """Log the zygote's failure, once."""
        with self.lock:
            warning = self.zygote_state.take_warning()
        if warning is not None:
            logger.warning(
                "worker preload is off from now on, workers start as fresh interpreters: %s",
                warning,
            )

    def registered(self, pid: int) -> None:
        """The worker ``pid`` connected to the node: it is no longer starting."""
        with self.lock:
            if pid in self._unregistered:
                self._unregistered.discard(pid)
                if pid in self._env_of:
                    self._uncount(self._env_of.pop(pid), 1)
                else:
                    self.starting = max(0, self.starting - 1)
                self._failed_starts = 0

    def _reap(self, pid: int) -> None:
        """Wait (briefly) for the exit status of ``pid``, whose output just ended: a process
        closes its files before its exit status is ready, so without this the last worker
        to exit could stay in ``procs`` until another one's output ends."""
        with self.lock:
            proc = self.procs.get(pid)
        if proc is not None:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:  # still running without output: kept
                pass

    def _forget_exited(self) -> None:
        """Drop the workers that exited and whose output was read to its end (their pipes
        are closed), so a node whose actors come and go keeps no record or fd of them."""
        with self.lock:
            if self._closed:
                return  # stop() waits for and closes them all
            gone = [
                pid
                for pid, p in self.procs.items()
                if p.stdout is not None and p.stdout.closed and p.poll() is not None
            ]
            for pid in gone:
                del self.procs[pid]

    def _exited(self, pid: int) -> None:
        """The worker ``pid``'s output ended (it exited). One that never registered (killed
        while it started) is replaced: the node asked for it, and asks again only when its
        queue changes. After ``MAX_FAILED_STARTS`` such exits in a row (workers that cannot
        start) none is replaced until one registers."""
        with self.lock:
            if pid not in self._unregistered or self._closed:
                return
            self._unregistered.discard(pid)
            if pid in self._env_of:  # not replaced: the node asks again as its queue changes
                self._uncount(self._env_of.pop(pid), 1)
                logger.warning("worker %d of a runtime_env exited before it registered", pid)
                return
            self.starting = max(0, self.starting - 1)
            self._failed_starts += 1
            replace = self._failed_starts <= MAX_FAILED_STARTS
        if replace:
            logger.info("worker %d exited before it registered: starting another", pid)
            self.start(1)
        else:
            logger.error(
                "%d workers in a row exited before they registered; not starting more until "
                "one does (see their logs, worker-<pid>.out)",
                MAX_FAILED_STARTS,
            )

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
                try:
                    self._copy_output(key, files)
                except Exception:  # one worker's output must not stop everyone's
                    logger.exception("copying the output of worker %s failed", key.data)
        for f in files.values():
            f.close()

    def _copy_output(self, key: Any, files: dict[int, Any]) -> None:
        """Copy what worker ``key.data`` wrote to its log file (and the driver); at its end,
        close the pipe and record the exit."""
        pid = key.data
        try:
            data = os.read(key.fd, 65536)
        except (BlockingIOError, OSError):
            data = b""
        if not data:
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
            f = files.pop(pid, None)
            if f is not None:
                f.close()
            self._exited(pid)
            self._reap(pid)
            self._forget_exited()
            return
        if pid not in files:
            files[pid] = session_files.open_private(self.logs_dir / f"worker-{pid}.out")
        files[pid].write(data)
        files[pid].flush()
        if self.log_to_driver:
            text = data.decode(errors="replace")
            lines = [f"(pid={pid}, ip=127.0.0.1) {line}" for line in text.splitlines()]
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()

    def stop(self) -> None:
        """Stop every worker (SIGTERM, SIGKILL after 3 s) and the log thread."""
        with self.lock:
            self._closed = True
            self._queued = 0
            self._wake.notify_all()
            procs = list(self.procs.values())
        if self.zygote is not None:
            self.zygote.close()  # a fork in flight fails at once
            self._forker.join(timeout=5)
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
