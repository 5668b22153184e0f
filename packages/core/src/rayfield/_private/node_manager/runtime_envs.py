"""A node's runtime_envs other than the default: their setup and their workers' start.

The native scheduler runs a task only on a worker registered with the task's runtime_env
(its canonical JSON) and asks for workers per runtime_env (``NeedWorker.runtime_env``).
For a runtime_env other than the default, :class:`RuntimeEnvs` prepares what a worker
needs before it starts (:meth:`RuntimeEnvs.prepare`, on a short-lived thread per
request), and the ``WorkerPool`` spawns fresh interpreters with it (``reserve_env``, then
``spawn_env``; never forked from the zygote, whose modules saw the default environment):

- the process environment: the node's worker environment, the env's ``env_vars`` over it,
  ``RAYFIELD_RUNTIME_ENV`` (the canonical JSON, which the worker registers with and
  reads back in ``get_runtime_context().runtime_env``) and ``RAYFIELD_RUNTIME_ENV_DIR``;
- for ``pip``: a virtual environment per set of requirements (``<cache>/pip/<hash>/``,
  made by ``python -m venv --without-pip --system-site-packages`` and filled by the
  node's own pip, ``pip --python <venv python> install``), made once per node (a lock
  file makes concurrent nodes on one machine wait for the first; within a node
  concurrent requests wait on one setup) and kept for later sessions. Its workers run
  that venv's Python, with its ``site-packages`` ahead of the node's module search path,
  so the installed versions win.

Packages (working_dir, py_modules) are unpacked by the worker itself, before it registers
(``runtime/runtime_env_setup.py``). A failed setup never raises here: the workers start
with ``RAYFIELD_RUNTIME_ENV_ERROR`` set (the node's Python, none of the env), register
for the runtime_env and fail each task they get with ``RuntimeEnvSetupError`` (pip's
output tail in the message), one task each. A failure is remembered for
``FAILED_SETUP_RETRY_S`` (the tasks of that env asked for meanwhile fail at once); a later
request tries the setup again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rayfield._private.common import private_files
from rayfield._private.common import runtime_env as renv

if TYPE_CHECKING:
    from rayfield._private.node_manager.worker_pool import WorkerPool

__all__ = ["PIP_OUTPUT_TAIL", "RuntimeEnvs", "SetupResult"]

logger = logging.getLogger("rayfield")

PIP_OUTPUT_TAIL = 3000  # characters of pip's output an install failure reports
FAILED_SETUP_RETRY_S = 30.0  # a failed setup is tried again after this long
READY = ".rayfield-ready"

SetupResult = tuple[dict[str, str], "str | None"]
"""What a worker of a runtime_env starts with: environment overrides and its Python
(None: the node's)."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with private_files.open_private(path, "ab") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class RuntimeEnvs:
    """Sets up the runtime_envs of one node, each once, and starts their workers.

    Args:
        cache_dir: the node's runtime_env cache (``<temp_dir>/runtime_resources``), made
            0700 and checked to be this user's on first use.
    """

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self._lock = threading.Lock()
        self._venvs: dict[str, threading.Lock] = {}  # one setup at a time per venv
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._failed: dict[str, tuple[float, str]] = {}  # env -> (when, why)
        self._threads: list[threading.Thread] = []
        self._closed = False

    def start_workers(self, pool: WorkerPool, env_string: str, n: int) -> None:
        """Start ``n`` workers of ``env_string`` in ``pool`` (fewer at its cap): reserved
        now, spawned by a short-lived ``rayfield-runtime-env`` thread once :meth:`prepare`
        returned."""
        n = pool.reserve_env(env_string, n)
        if not n:
            return
        thread = threading.Thread(
            target=self._start, args=(pool, env_string, n), daemon=True, name="rayfield-runtime-env"
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _start(self, pool: WorkerPool, env_string: str, n: int) -> None:
        overrides, python = self.prepare(env_string)
        for i in range(n):
            if not pool.spawn_env(env_string, overrides, python):
                pool.release_env(env_string, n - i - 1)  # the pool stopped
                return

    def prepare(self, env_string: str) -> SetupResult:
        """Environment overrides and Python for a worker of ``env_string``; on failure,
        overrides that make the worker fail its tasks with the reason. Never raises."""
        with self._lock:
            when, why = self._failed.get(env_string, (0.0, ""))
        if why and time.monotonic() - when < FAILED_SETUP_RETRY_S:
            return self._failing(env_string, why)
        try:
            env = renv.parse(env_string)
            overrides = dict(env.get("env_vars") or {})
            overrides[renv_var("ENV")] = env_string
            overrides[renv_var("ENV_DIR")] = str(self.cache_dir)
            python = None
            if env.get("pip"):
                venv = self._venv(env["pip"], renv.setup_timeout_s(env))
                python = str(venv / "bin" / "python")
                site = sysconfig.get_path(
                    "purelib", vars={"base": str(venv), "platbase": str(venv)}
                )
                overrides["PYTHONPATH"] = site  # the node's paths follow (WorkerPool)
                overrides["VIRTUAL_ENV"] = str(venv)
            return overrides, python
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            logger.warning("runtime_env setup failed: %s", why.splitlines()[0])
            with self._lock:
                self._failed[env_string] = (time.monotonic(), why)
            return self._failing(env_string, why)

    def _failing(self, env_string: str, why: str) -> SetupResult:
        """A worker of ``env_string`` that fails its tasks with ``why``."""
        return {
            renv_var("ENV"): env_string,
            renv_var("ENV_DIR"): str(self.cache_dir),
            renv_var("ENV_ERROR"): why,
        }, None

    def _venv(self, pip: dict[str, Any], timeout_s: float | None) -> Path:
        """The virtual environment with ``pip``'s packages, made now if missing."""
        spec = json.dumps([pip, sys.executable, sys.version], sort_keys=True)
        digest = hashlib.sha1(spec.encode()).hexdigest()[:16]
        root = private_files.ensure_private_dir(self.cache_dir / "pip", what="the pip cache")
        venv = root / digest
        with self._lock:
            local = self._venvs.setdefault(digest, threading.Lock())
        with local, _locked(root / f"{digest}.lock"):
            if (venv / READY).exists():
                return venv
            shutil.rmtree(venv, ignore_errors=True)  # a setup that failed or was cut short
            try:
                self._run(
                    [
                        sys.executable,
                        "-m",
                        "venv",
                        "--without-pip",
                        "--system-site-packages",
                        str(venv),
                    ],
                    timeout_s,
                    "python -m venv",
                )
                cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
                quiet = ["--disable-pip-version-check", "--no-input"]
                self._run([*cmd, "install", *quiet, *pip["packages"]], timeout_s, "pip install")
                if pip.get("pip_check"):
                    self._run([*cmd, "check"], timeout_s, "pip check")
            except BaseException:
                shutil.rmtree(venv, ignore_errors=True)
                raise
            private_files.write_bytes(venv / READY, b"")
            return venv

    def _run(self, cmd: list[str], timeout_s: float | None, what: str) -> None:
        """Run a setup step; RuntimeError with the tail of its output when it fails."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the node is stopping")
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            self._procs.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise RuntimeError(
                f"{what} did not finish within setup_timeout_seconds={timeout_s:g}; "
                f"its output ends with:\n{_tail(out)}"
            ) from None
        finally:
            with self._lock:
                self._procs.discard(proc)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{what} failed (exit status {proc.returncode}): {' '.join(cmd[-3:])}; "
                f"its output ends with:\n{_tail(out)}"
            )

    def stop(self) -> None:
        """End the setup steps running now (their setups fail; none starts after) and wait
        for the start threads (before the pool stops, which ends what they spawned)."""
        with self._lock:
            self._closed = True
            procs, threads = list(self._procs), list(self._threads)
        for proc in procs:
            with contextlib.suppress(OSError):
                proc.kill()
        for thread in threads:
            thread.join(timeout=5)


def renv_var(name: str) -> str:
    """The worker environment variable ``RAYFIELD_RUNTIME_<name>``."""
    return f"RAYFIELD_RUNTIME_{name}"


def _tail(out: bytes | None) -> str:
    text = (out or b"").decode(errors="replace").strip()
    return text[-PIP_OUTPUT_TAIL:]
