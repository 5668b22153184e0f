"""Shared helpers: the command run in a new process, the processes of a cluster
directory, a cluster YAML writer, and the node updaters over an in-memory provider that
the updater tests (scripted and over SSH) share. Waits use
:func:`rayfield.testing.wait_for`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
import yaml
from memory_provider import MemoryProvider

from rayfield.autoscaler.command_runner import CommandRunner
from rayfield.autoscaler.config import prepare_config
from rayfield.autoscaler.node_provider import (
    KIND_WORKER,
    STATUS_UNINITIALIZED,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
)
from rayfield.autoscaler.updater import NodeUpdater, plan_update, runtime_hash

pytest_plugins = ["rayfield.testing"]

UNIT = Path(__file__).resolve().parent / "unit"


@pytest.fixture(scope="session")
def rayfield_known_leaks(rayfield_known_leaks: list[str]) -> list[str]:
    from rayfield.testing import GRPC_THREADS  # not rayfield's: grpc's runtime threads

    return [*rayfield_known_leaks, GRPC_THREADS]


@pytest.fixture(scope="session", autouse=True)
def grpc_runtime_started() -> Iterator[None]:
    """What lives as long as the process, made before the first module's leak snapshot:
    numpy's BLAS thread pool (made when numpy is first imported, here through the
    protocol's flatbuffers) and grpc's runtime, kept up for the session
    (``rayfield.testing.grpc_runtime``): tests ask the GCS over grpc."""
    import numpy  # noqa: F401

    from rayfield.testing import grpc_runtime

    with grpc_runtime():
        yield


@pytest.fixture(scope="module", autouse=True)
def module_leak_check(rayfield_known_leaks: list[str]) -> Iterator[None]:
    """Each test module, once its module-scoped fixtures (fake API servers, sshd hosts,
    clusters) are torn down, leaves no thread, fd, child process or rayfield shared
    memory behind (:class:`rayfield.testing.LeakCheck`)."""
    from rayfield.testing import LeakCheck  # after pytest_plugins has loaded it

    check = LeakCheck(allow=rayfield_known_leaks)
    yield
    check.check()


@pytest.fixture(autouse=True)
def unit_leak_check(request: pytest.FixtureRequest) -> None:
    """A test under ``unit/`` (no processes, sockets or servers) is checked on its own:
    ``rayfield.testing``'s ``rayfield_leak_check`` around each test."""
    if UNIT in Path(request.node.path).resolve().parents:
        request.getfixturevalue("rayfield_leak_check")


T = TypeVar("T")


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run ``rayfield-autoscaler ARGS`` in a new process; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "rayfield.autoscaler.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def processes_under(root: Path) -> list[psutil.Process]:
    """This user's running processes whose command line names a path under ``root`` (a
    zombie has exited: only its reaping by init is left)."""
    prefix = str(root.resolve())
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(prefix in arg for arg in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def write_config(path: Path, cluster_dir: Path, **overrides: Any) -> Path:
    """A local_process cluster YAML: a head without CPUs, 1-CPU workers. Its head leaves
    this machine's ``session_latest`` alone (``test_local_process.py`` checks the link)."""
    cfg: dict[str, Any] = {
        "cluster_name": "t",
        "provider": {
            "type": "local_process",
            "cluster_dir": str(cluster_dir),
            "link_latest_session": False,
        },
        "max_workers": 2,
        "idle_timeout_minutes": 0.05,
        "head_node_type": "head",
        "available_node_types": {
            "head": {"resources": {"CPU": 0}, "node_config": {"object_store_memory": 64 << 20}},
            "worker": {
                "resources": {"CPU": 1},
                "min_workers": 1,
                "max_workers": 2,
                "node_config": {"object_store_memory": 64 << 20},
            },
        },
    }
    cfg.update(overrides)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Any:
    """A cluster directory whose processes are all gone when the test ends (the test
    fails if it had to kill any)."""
    root = tmp_path / "cluster"
    yield root
    left = processes_under(tmp_path)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, f"processes left running: {[p.pid for p in left]}"


def ssh_config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """A prepared ``local`` (SSH) cluster config with a dummy key; ``extra`` keys added."""
    key = tmp_path / "key"
    key.write_text("k")
    raw = {
        "cluster_name": "s",
        "provider": {"type": "local", "head_ip": "10.0.0.1", "worker_ips": ["10.0.0.2"]},
        "auth": {"ssh_user": "root", "ssh_private_key": str(key)},
        "max_workers": 1,
        **extra,
    }
    return prepare_config(raw)


class TagHistory(MemoryProvider):
    """Keeps every status a node was tagged with."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[str] = []

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        if TAG_NODE_STATUS in tags:
            self.statuses.append(tags[TAG_NODE_STATUS])
        super().set_node_tags(node_id, tags)


MakeUpdaters = Callable[..., tuple[list[NodeUpdater], TagHistory]]


@pytest.fixture
def worker_updaters(tmp_path: Path) -> MakeUpdaters:
    """A factory: ``make(cfg, runners, envs=None, **kw)`` creates one uninitialized
    worker a runner (``n0``, ``n1``...) in a new :class:`TagHistory` and returns the
    :class:`NodeUpdater` of each (its log ``<tmp_path>/nodes/<id>/update.log``, the
    worker plan and runtime hash of ``cfg``; ``kw`` goes to ``NodeUpdater``) and the
    provider."""

    def make(
        cfg: dict[str, Any],
        runners: Sequence[CommandRunner],
        envs: Sequence[dict[str, str]] | None = None,
        **kw: Any,
    ) -> tuple[list[NodeUpdater], TagHistory]:
        provider = TagHistory()
        tags = {TAG_NODE_KIND: KIND_WORKER, TAG_NODE_STATUS: STATUS_UNINITIALIZED}
        provider.create_node({"resources": {}}, tags, len(runners))
        updaters = [
            NodeUpdater(
                f"n{i}",
                provider,
                runner,
                plan_update(cfg, KIND_WORKER),
                dict(envs[i]) if envs else {},
                tmp_path / "nodes" / f"n{i}" / "update.log",
                runtime_hash(cfg, KIND_WORKER),
                **kw,
            )
            for i, runner in enumerate(runners)
        ]
        return updaters, provider

    return make
