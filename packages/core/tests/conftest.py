"""Shared fixtures: a real local runtime per test, and checks that nothing leaks.

The fixtures come from :mod:`rayfield.testing` (the plugin the libraries' tests use too).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ["pytester", "rayfield.testing"]


@pytest.fixture
def no_worker_left(rayfield_leak_check: Any) -> Iterator[None]:
    """After the test and the fixtures that use this one, no worker process (nor thread,
    fd or shared memory of the runtime) is left."""
    yield


@pytest.fixture
def cluster(rayfield_runtime: dict[str, Any]) -> dict[str, Any]:
    """rf.init(num_cpus=2, 256 MiB store) in the test's tmp_path, shut down afterwards;
    the test fails if it leaves threads, fds, processes or shared memory behind."""
    return rayfield_runtime
