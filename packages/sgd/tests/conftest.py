"""Shared fixtures: one local cluster per test module (2 CPUs), and small creators."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rayfield as rf


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any) -> Iterator[Any]:
    """rf.init(num_cpus=2) in a private temp dir, shared by the tests of one module."""
    info = rf.init(
        num_cpus=2,
        object_store_memory=256 << 20,
        temp_dir=str(tmp_path_factory.mktemp("rf")),
    )
    try:
        yield info
    finally:
        rf.shutdown()
