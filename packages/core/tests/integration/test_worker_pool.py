"""The worker pool starts no worker once it is stopping, also when a start races with
its stop (the node's event thread asking for workers while the node shuts down)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rayfield._private.node_manager import worker_pool
from rayfield._private.node_manager.worker_pool import WorkerPool


def test_a_stopped_pool_starts_no_worker(tmp_path: Path) -> None:
    pool = WorkerPool(str(tmp_path / "node.sock"), tmp_path, cap=2, log_to_driver=False)
    pool.stop()
    pool.start(1)
    assert pool.procs == {}


def test_a_worker_started_while_the_pool_stops_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = WorkerPool(str(tmp_path / "node.sock"), tmp_path, cap=2, log_to_driver=False)
    made: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_stop(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        # A process that would outlive the test, then stop() runs before start() goes on.
        proc = real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kw)
        made.append(proc)
        pool.stop()
        return proc

    monkeypatch.setattr(worker_pool.subprocess, "Popen", popen_then_stop)
    pool.start(2)
    assert len(made) == 1 and made[0].poll() is not None  # ended, not left running
    assert made[0].stdout is not None and made[0].stdout.closed
    assert pool.procs == {}
