"""Helpers and pytest fixtures for testing programs written on rayfield.

The counterpart of Ray's ``ray._private.test_utils`` (``wait_for_condition``) and its
``ray_start_regular`` fixtures, as a public module: the tests of rayfield's own packages
(core, tune, rllib, sgd) use it, and so can a user's.

* :func:`wait_for` polls observable state until it holds (instead of ``time.sleep``).
* :func:`local_runtime` starts an embedded runtime with given resources in a private
  temporary directory, and shuts it down.
* :class:`LeakCheck` notes the process's threads, file descriptors, child processes and
  rayfield shared-memory files, and fails when a test leaves any behind.
* :func:`second_user`, :func:`run_as` and :func:`shared_tmp` play another local user who
  attacks rayfield's files (a real user made with ``useradd``; the tests run as root).
* The pytest fixtures ``rayfield_runtime`` (one runtime per test),
  ``rayfield_module_runtime`` (one per test module), ``rayfield_leak_check`` and
  ``rayfield_known_leaks`` (what the leak check tolerates suite-wide). Enable them in the
  top-level ``conftest.py`` of a test suite (pytest accepts ``pytest_plugins`` only
  there)::

      pytest_plugins = ["rayfield.testing"]

  and size the runtime with a marker on the test or the module::

      @pytest.mark.rayfield_runtime(num_cpus=4, resources={"gpu_slot": 1})
      def test_fanout(rayfield_runtime): ...

A cluster of several nodes needs the ``rayfield start`` command (rayfield-cli), which
rayfield-core does not depend on: the multi-node helpers live with the CLI's tests
(``packages/cli/tests/integration/clusterutil.py``) and use :func:`wait_for` from here.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

import rayfield
from rayfield.store.testing import wait_for

T = TypeVar("T")

__all__ = [
    "GRPC_THREADS",
    "RUNTIME_LEAKS",
    "SECOND_USER",
    "SECOND_USER_OPT_OUT",
    "LeakCheck",
    "ResourceSnapshot",
    "grpc_runtime",
    "local_runtime",
    "rayfield_known_leaks",
    "rayfield_leak_check",
    "rayfield_module_runtime",
    "rayfield_runtime",
    "rayfield_second_user",
    "rayfield_shared_tmp",
    "run_as",
    "second_user",
    "shared_tmp",
    "wait_for",
]

DEFAULT_NUM_CPUS = 2
DEFAULT_STORE_BYTES = 256 << 20


@contextlib.contextmanager
def local_runtime(
    num_cpus: float = DEFAULT_NUM_CPUS,
    object_store_memory: int = DEFAULT_STORE_BYTES,
    *,
    temp_dir: str | os.PathLike[str] | None = None,
    **init_kwargs: Any,
) -> Iterator[dict[str, Any]]:
    """An embedded runtime (``rayfield.init``) for the duration of the ``with`` block.

    Args:
        num_cpus: the node's CPUs.
        object_store_memory: the store's size in bytes.
        temp_dir: root of the session directory; default a new private directory,
            removed afterwards.
        **init_kwargs: more arguments of :func:`rayfield.init` (``resources``,
            ``num_gpus``, ``local_mode``...).

    Yields:
        What :func:`rayfield.init` returned (the node's addresses).

    Raises:
        RuntimeError: this process is already connected to a runtime (a test that left
            one running, or a nested ``local_runtime``).
    """
    if rayfield.is_initialized():
        raise RuntimeError(
            "local_runtime: this process is already connected to a rayfield runtime; "
            "call rayfield.shutdown() first"
        )
    own_dir = temp_dir is None
    root = tempfile.mkdtemp(prefix="rayfield-test-") if temp_dir is None else os.fspath(temp_dir)
    try:
        info = rayfield.init(
            num_cpus=num_cpus,
            object_store_memory=object_store_memory,
            temp_dir=root,
            **init_kwargs,
        )
        try:
            yield info
        finally:
            rayfield.shutdown()
    finally:
        if own_dir:
            shutil.rmtree(root, ignore_errors=True)


# ---- leaks -----------------------------------------------------------------------------

SHM_DIR = Path("/dev/shm")

#: Leftovers of the runtime itself that are known and not fixed yet, tolerated by the
#: fixtures' leak check by default (regular expressions over :class:`LeakCheck`'s
#: descriptions). Each entry names its cause; remove it with the fix. None is known now.
RUNTIME_LEAKS: tuple[str, ...] = ()

#: Not rayfield's: grpc's process-wide runtime. Its timer, event-engine and lifeguard
#: threads start with a process's first channel and live as long as the process (their
#: pool grows and shrinks with load). A suite whose test process talks to a cluster over
#: grpc adds this to ``rayfield_known_leaks`` and starts the runtime before its first
#: leak snapshot with :func:`grpc_runtime` (whose descriptors then need no allowance).
GRPC_THREADS = r"^native thread \d+ \((grpc_global_tim|event_engine|lifeguard)\)$"


@contextlib.contextmanager
def grpc_runtime() -> Iterator[None]:
    """grpc's process-wide runtime started and kept up for the ``with`` block: a channel
    to a port nothing listens on, tried once and held open until the block ends, so its
    epoll and eventfd descriptors are made before a leak check's snapshot and are not torn
    down and made again in between. Imports grpc."""
    import grpc

    channel = grpc.insecure_channel("127.0.0.1:1")
    try:
        with contextlib.suppress(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel).result(timeout=1)
        yield
    finally:
        channel.close()


def _fds() -> set[str]:
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                out.add(f"fd {fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
    return out


def _native_threads(python_ids: set[int | None]) -> set[str]:
    """The OS threads of this process that are not Python threads (started by C/C++)."""
    out = set()
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            if int(tid) in python_ids:
                continue
            with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as f:
                out.add(f"native thread {tid} ({f.read().strip()})")
    return out


def _children() -> set[str]:
    out = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE:
                out.add(f"child process {child.pid} {' '.join(child.cmdline())[:160]}")
    return out


@dataclass(frozen=True)
class ResourceSnapshot:
    """What this process holds at one moment, as readable descriptions per kind."""

    threads: frozenset[str] = field(default_factory=frozenset)
    fds: frozenset[str] = field(default_factory=frozenset)
    children: frozenset[str] = field(default_factory=frozenset)
    shm: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def take(cls) -> ResourceSnapshot:
        """The Python threads, open file descriptors, live child processes (recursive)
        and ``/dev/shm`` files with "rayfield" in their name, now."""
        python = threading.enumerate()
        threads = {f"thread {t.name!r} ({t.native_id})" for t in python}
        threads |= _native_threads({t.native_id for t in python})
        shm: set[str] = set()
        with contextlib.suppress(OSError):
            shm = {f"shared memory {p}" for p in SHM_DIR.iterdir() if "rayfield" in p.name}
        return cls(frozenset(threads), frozenset(_fds()), frozenset(_children()), frozenset(shm))

    def new_since(self, before: ResourceSnapshot) -> list[str]:
        """What this snapshot holds that ``before`` did not, sorted."""
        return sorted(
            item
            for kind in ("threads", "fds", "children", "shm")
            for item in getattr(self, kind) - getattr(before, kind)
        )


class LeakCheck:
    """Fails when a test leaves threads, fds, child processes or shared memory behind.

    Take it before the test (``check = LeakCheck()``), call :meth:`check` after: it waits
    up to ``grace_s`` for resources that are being released (worker processes exiting,
    threads joining), then raises listing what is left.

    Args:
        allow: regular expressions; a leftover whose description matches one is tolerated
            (for a known leak, named where the allowance is made).
        grace_s: seconds to wait for resources still being released.
    """

    def __init__(self, allow: Iterable[str] = (), grace_s: float = 10.0) -> None:
        self.allow = [re.compile(pattern) for pattern in allow]
        self.grace_s = grace_s
        gc.collect()
        self.before = ResourceSnapshot.take()

    def leftovers(self) -> list[str]:
        """What is held now and was not before, less what ``allow`` tolerates."""
        gc.collect()
        new = ResourceSnapshot.take().new_since(self.before)
        return [item for item in new if not any(p.search(item) for p in self.allow)]

    def check(self) -> None:
        """Wait up to ``grace_s`` for the leftovers to go.

        Raises:
            AssertionError: something is still held, listed one item per line.
        """
        deadline = time.monotonic() + self.grace_s
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            raise AssertionError(
                "the test left behind (threads, fds, child processes, shared memory):\n  "
                + "\n  ".join(left)
            )


# ---- a second local user ----------------------------------------------------------------

SECOND_USER = "rfattacker"
SECOND_USER_OPT_OUT = "RAYFIELD_TESTS_NO_SECOND_USER"
"""Set to 1 to run without the second-user tests knowingly (they are skipped, not failed)."""


class SecondUserUnavailable(RuntimeError):
    """This machine cannot make a second user (not root, or no ``useradd``/``runuser``)."""


def _second_user_missing() -> str | None:
    if os.geteuid() != 0:
        return "the tests do not run as root"
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3 is missing"
    return None


@contextlib.contextmanager
def second_user(name: str = SECOND_USER) -> Iterator[pwd.struct_passwd]:
    """A real local user (a system user with no home and no login) for the length of the
    ``with`` block, removed afterwards if it was made here.

    Raises:
        SecondUserUnavailable: this process is not root, or ``useradd``, ``userdel``,
            ``runuser`` or ``/usr/bin/python3`` is missing (the message says which).
    """
    missing = _second_user_missing()
    if missing:
        raise SecondUserUnavailable(missing)
    made = subprocess.run(["id", "-u", name], capture_output=True).returncode != 0
    if made:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
        )
    try:
        yield pwd.getpwnam(name)
    finally:
        if made:
            subprocess.run(["userdel", name], check=False)


def run_as(user: str, code: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """Start ``/usr/bin/python3 -c code args...`` as ``user`` (``runuser``), in ``/``, with
    text pipes as ``popen`` asks (``stdin``, ``stdout``, ``env``...)."""
    popen.setdefault("cwd", "/")
    argv = ["runuser", "-u", user, "--", "/usr/bin/python3", "-c", code, *args]
    return subprocess.Popen(argv, text=True, **popen)


@contextlib.contextmanager
def shared_tmp(prefix: str = "rf-2nd-user-") -> Iterator[Path]:
    """A stand-in for ``/tmp`` that every user may write (mode 1777, as ``/tmp``), removed
    afterwards; point ``TMPDIR`` of the processes under test at it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---- pytest plugin -----------------------------------------------------------------------

try:
    import pytest
except ImportError:  # the helpers above work without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    def pytest_configure(config: Any) -> None:
        """Register the markers of the fixtures below."""
        config.addinivalue_line(
            "markers",
            "rayfield_runtime(**init_kwargs): arguments of rayfield.init for the "
            "rayfield_runtime / rayfield_module_runtime fixtures (default num_cpus=2, "
            "object_store_memory=256 MiB)",
        )
        config.addinivalue_line(
            "markers",
            "rayfield_allow_leaks(*patterns, reason): leftovers the leak check tolerates "
            "(regular expressions over its descriptions), for a known leak named in reason",
        )

    def _leak_check(node: Any, known: Iterable[str]) -> LeakCheck:
        patterns = list(known)
        for marker in node.iter_markers("rayfield_allow_leaks"):
            if not marker.kwargs.get("reason"):
                raise ValueError(
                    f"{node.nodeid}: rayfield_allow_leaks needs reason='...' saying which "
                    "leak it tolerates and why"
                )
            patterns.extend(marker.args)
        return LeakCheck(allow=patterns)

    def _runtime_kwargs(node: Any) -> dict[str, Any]:
        marker = node.get_closest_marker("rayfield_runtime")
        return dict(marker.kwargs) if marker is not None else {}

    @pytest.fixture(scope="session")
    def rayfield_known_leaks() -> list[str]:
        """Leftovers the leak check tolerates in every test of a suite (regular
        expressions over its descriptions): :data:`RUNTIME_LEAKS` by default. A suite
        that lives with another known leak outside its own code overrides this fixture in
        its ``conftest.py``, with a comment naming the leak; a single test uses the
        ``rayfield_allow_leaks`` marker instead."""
        return list(RUNTIME_LEAKS)

    @pytest.fixture
    def rayfield_leak_check(request: Any, rayfield_known_leaks: list[str]) -> Iterator[LeakCheck]:
        """Fails the test when it leaves threads, fds, child processes or rayfield
        shared memory behind (see :class:`LeakCheck`; tolerate a known leak with
        ``@pytest.mark.rayfield_allow_leaks(pattern, reason=...)``)."""
        check = _leak_check(request.node, rayfield_known_leaks)
        yield check
        check.check()

    @pytest.fixture
    def rayfield_runtime(
        request: Any, tmp_path: Path, rayfield_leak_check: LeakCheck
    ) -> Iterator[dict[str, Any]]:
        """A runtime of its own for one test (``rayfield.init`` in ``tmp_path``, 2 CPUs
        and a 256 MiB store unless ``@pytest.mark.rayfield_runtime(...)`` says
        otherwise), shut down afterwards, and checked for leaks."""
        with local_runtime(temp_dir=tmp_path, **_runtime_kwargs(request.node)) as info:
            yield info

    @pytest.fixture(scope="module")
    def rayfield_second_user() -> Iterator[pwd.struct_passwd]:
        """A real second local user for the module's tests (see :func:`second_user`).
        Without root or ``useradd`` the test FAILS, unless ``RAYFIELD_TESTS_NO_SECOND_USER=1``
        says the run knowingly goes without it (then it is skipped)."""
        missing = _second_user_missing()
        if missing:
            if os.environ.get(SECOND_USER_OPT_OUT) == "1":
                pytest.skip(f"{SECOND_USER_OPT_OUT}=1: the second-user attack is not tested")
            pytest.fail(
                f"this test needs a real second user: {missing}. Run it as root on a "
                f"machine with useradd and runuser, or set {SECOND_USER_OPT_OUT}=1 to go "
                "without it knowingly",
                pytrace=False,
            )
        with second_user() as user:
            yield user

    @pytest.fixture
    def rayfield_shared_tmp() -> Iterator[Path]:
        """A 1777 stand-in for ``/tmp`` (see :func:`shared_tmp`)."""
        with shared_tmp() as path:
            yield path

    @pytest.fixture(scope="module")
    def rayfield_module_runtime(
        request: Any, tmp_path_factory: Any, rayfield_known_leaks: list[str]
    ) -> Iterator[dict[str, Any]]:
        """One runtime shared by the tests of a module (sized by a module-level
        ``pytestmark = pytest.mark.rayfield_runtime(...)``), shut down and checked for
        leaks after the module's last test."""
        check = _leak_check(request.node, rayfield_known_leaks)
        temp_dir = tmp_path_factory.mktemp("rayfield")
        with local_runtime(temp_dir=temp_dir, **_runtime_kwargs(request.node)) as info:
            yield info
        check.check()
