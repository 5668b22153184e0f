"""Shared helpers: a deadline-bounded wait on observable state, the command run in a
new process, the processes of a cluster directory, and a cluster YAML writer."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
import yaml

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout_s: float, what: str, period_s: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(period_s)


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
    """This user's processes whose command line names a path under ``root``."""
    prefix = str(root.resolve())
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(prefix in arg for arg in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def write_config(path: Path, cluster_dir: Path, **overrides: Any) -> Path:
    """A local_process cluster YAML: a head without CPUs, 1-CPU workers."""
    cfg: dict[str, Any] = {
        "cluster_name": "t",
        "provider": {"type": "local_process", "cluster_dir": str(cluster_dir)},
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
