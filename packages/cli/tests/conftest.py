"""Fixtures shared by the cluster tests of rayfield-cli."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterutil import start_nodes, stop_in_background, wait_for_stops

pytest_plugins = ["rayfield.testing"]


@pytest.fixture(scope="session", autouse=True)
def clusters_stopped() -> Iterator[None]:
    """After the last test: every cluster stopped in the background has stopped (the
    run fails, naming it, if a ``rayfield stop`` did not succeed)."""
    yield
    wait_for_stops()


@pytest.fixture(scope="module")
def driver_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Per test module: two nodes started by the CLI (the second with 4 of resource "b")
    and this process connected to them as a driver; yields (address, temp_dir), then
    disconnects and stops both nodes."""
    import rayfield as rf

    temp_dir = tmp_path_factory.mktemp("rf")
    address = start_nodes(temp_dir, resources='{"b": 4}')
    rf.init(address=address, temp_dir=str(temp_dir))
    try:
        yield address, temp_dir
    finally:
        rf.shutdown()
        stop_in_background(temp_dir)
