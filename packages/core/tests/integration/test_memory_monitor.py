"""The memory monitor against real workers: a task that eats memory is killed.

The threshold is set 4 GB above the machine's usage at the start of each test, so a task
growing by 100 MB every 0.1 s crosses it within about four seconds. The margin is wide
because other processes on the machine move the usage too: one that grew by 1.3 GB while
the retry test ran (a demo beside the test run) kept the node above a 1.2 GB margin after
the hog was killed, and the monitor rightly killed the retry as well.

Each test may hold up to 6 GB, so they are ``slow`` (``nox -s learning``); the monitor's
policy (whom it kills, when) is unit-tested without processes in
``tests/unit/test_memory_policy.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import rayfield as rf
from rayfield import testing
from rayfield._private.node_manager.memory_monitor import (
    ENV_REFRESH_MS,
    ENV_THRESHOLD,
    memory_usage,
)
from rayfield.exceptions import OutOfMemoryError, WorkerCrashedError

pytestmark = pytest.mark.slow

MARGIN_BYTES = 4000 << 20  # the threshold's distance above the usage at the start
STEP_BYTES = 100 << 20
LIMIT_BYTES = 6000 << 20


def grow_memory() -> str:
    """Allocate 100 MB every 0.1 s up to 6 GB, then hold it; the monitor should kill us."""
    chunks = []
    while len(chunks) * STEP_BYTES < LIMIT_BYTES:
        chunks.append(b"\x01" * STEP_BYTES)  # written, so resident (not lazily zeroed)
        time.sleep(0.1)
    time.sleep(20)
    return "survived"


@rf.remote(max_retries=0)
def hog() -> str:
    return grow_memory()


@rf.remote(max_retries=1)
def hog_once(marker: str) -> str:
    """Eats memory on its first run only: its retry finds the marker and returns."""
    path = Path(marker)
    if path.exists():
        return "retried"
    path.write_text("first run")
    return grow_memory()


@rf.remote(max_retries=0)
def sleeper(marker: str, seconds: float) -> str:
    Path(marker).write_text("started")
    time.sleep(seconds)
    return "slept"


@rf.remote
def square(x: int) -> int:
    return x * x


@pytest.fixture
def low_threshold_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A node whose memory monitor fires 4 GB above the current usage."""
    usage = memory_usage()
    threshold = (usage.used_bytes + MARGIN_BYTES) / usage.total_bytes
    monkeypatch.setenv(ENV_THRESHOLD, f"{threshold:.4f}")
    monkeypatch.setenv(ENV_REFRESH_MS, "100")
    info = rf.init(num_cpus=2, object_store_memory=64 << 20, temp_dir=str(tmp_path / "rf"))
    try:
        assert rf.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]  # workers up
        yield info
    finally:
        rf.shutdown()
        children = psutil.Process().children(recursive=True)
        assert not [c for c in children if c.is_running() and c.status() != "zombie"], children


def test_non_retriable_task_is_killed_and_raises(
    low_threshold_cluster: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rayfield")
    started = tmp_path / "sleeper-started"
    other = sleeper.remote(str(started), 3.0)  # older, so not the newest: must survive
    testing.wait_for(started.exists, 20, f"{started} to appear")
    with pytest.raises(OutOfMemoryError) as info:
        rf.get(hog.remote(), timeout=30)
    message = str(info.value)
    assert "killed by the memory monitor" in message
    assert "out of memory" in message
    assert ENV_THRESHOLD in message
    assert isinstance(info.value, WorkerCrashedError)
    warnings = [r.getMessage() for r in caplog.records if "memory monitor" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "killed worker pid=" in warnings[0]
    assert "OutOfMemoryError" in warnings[0]
    assert ENV_THRESHOLD in warnings[0]
    # The other task and the node keep going.
    assert rf.get(other, timeout=20) == "slept"
    assert rf.get([square.remote(i) for i in range(8)], timeout=20) == [i * i for i in range(8)]


def test_retriable_task_is_retried(
    low_threshold_cluster: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rayfield")
    marker = tmp_path / "hog-once"
    assert rf.get(hog_once.remote(str(marker)), timeout=30) == "retried"
    warnings = [r.getMessage() for r in caplog.records if "memory monitor" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "it will be retried" in warnings[0]
    assert rf.get(square.remote(5), timeout=20) == 25
