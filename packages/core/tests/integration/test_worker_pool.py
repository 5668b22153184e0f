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


def _exiting_popen(real_popen: Any, made: list[subprocess.Popen[bytes]]) -> Any:
    """Popen that starts, instead of a worker, a process that exits at once without ever
    registering (a worker SIGKILLed while it starts)."""

    def popen(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        proc = real_popen([sys.executable, "-c", "pass"], **kw)
        made.append(proc)
        return proc

    return popen


def test_a_worker_that_dies_before_registering_is_replaced_and_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while it started, a worker never registers: the pool used to count it as
    starting for good, so the node asked for no other and its queue stalled."""
    from rayfield.testing import wait_for

    made: list[subprocess.Popen[bytes]] = []
    monkeypatch.setattr(worker_pool, "MAX_FAILED_STARTS", 3)
    monkeypatch.setattr(worker_pool.subprocess, "Popen", _exiting_popen(subprocess.Popen, made))
    pool = WorkerPool(str(tmp_path / "node.sock"), tmp_path, cap=8, log_to_driver=False)
    try:
        pool.start(1)
        # Replaced after each exit, 3 times in a row; then no more until one registers.
        wait_for(lambda: len(made) == 4 and pool.starting == 0, 20, "the replacements")
        assert len(made) == 4
        pool.start(1)  # the node asks again: one is started (and exits, not replaced)
        wait_for(lambda: len(made) == 5 and pool.starting == 0, 20, "the worker asked for")
        pool.registered(made[-1].pid)  # too late (it exited): nothing changes
        assert pool.starting == 0
        # Workers that exited are forgotten, their pipes closed (actors come and go).
        wait_for(lambda: pool.procs == {}, 20, "the exited workers forgotten")
        assert all(p.stdout is not None and p.stdout.closed for p in made)
    finally:
        pool.stop()


def test_registered_counts_each_worker_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_popen = subprocess.Popen

    def sleeper(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        return real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kw)

    monkeypatch.setattr(worker_pool.subprocess, "Popen", sleeper)
    pool = WorkerPool(str(tmp_path / "node.sock"), tmp_path, cap=8, log_to_driver=False)
    try:
        pool.start(2)
        assert pool.starting == 2
        first = next(iter(pool.procs))
        pool.registered(first)
        pool.registered(first)  # the same worker again: counted once
        pool.registered(424242)  # not one of this pool's
        assert pool.starting == 1
    finally:
        pool.stop()
