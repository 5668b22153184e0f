"""Shared fixtures: a real local cluster per test, and a check that nothing leaks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psutil
import pytest

import rayfield as rf


@pytest.fixture
def no_worker_left() -> Iterator[None]:
    """After the test and the fixtures that use this one, no worker process is left."""
    yield
    children = psutil.Process().children(recursive=True)
    assert not [c for c in children if c.is_running() and c.status() != "zombie"], children


@pytest.fixture
def cluster(tmp_path: Any, no_worker_left: None) -> Iterator[Any]:
    """rf.init(num_cpus=2) in a temp dir; after the test, no worker process is left."""
    info = rf.init(num_cpus=2, object_store_memory=256 << 20, temp_dir=str(tmp_path))
    try:
        yield info
    finally:
        rf.shutdown()
