"""The fixtures of rayfield-cli's cluster tests: the leak check of each test module, a
two-node cluster per module, and the wait for the clusters stopped in the background."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterutil import start_nodes, stop_in_background, stops_in_flight, wait_for_stops


@pytest.fixture(scope="session", autouse=True)
def clusters_stopped() -> Iterator[None]:
    """After the last test: every cluster stopped in the background has stopped (the
    run fails, naming it, if a ``rayfield stop`` did not succeed)."""
    yield
    wait_for_stops()


@pytest.fixture(scope="session")
def rayfield_known_leaks(rayfield_known_leaks: list[str]) -> list[str]:
    from rayfield.testing import GRPC_THREADS  # not rayfield's: grpc's runtime threads

    return [*rayfield_known_leaks, GRPC_THREADS]


@pytest.fixture(scope="session", autouse=True)
def grpc_runtime_started() -> Iterator[None]:
    """What lives as long as the process, made before the first module's leak snapshot:
    numpy's BLAS thread pool (made when numpy is first imported, here through the
    protocol's flatbuffers) and grpc's runtime, kept up for the session
    (``rayfield.testing.grpc_runtime``): the driver of these tests uses grpc."""
    import numpy  # noqa: F401

    from rayfield.testing import grpc_runtime

    with grpc_runtime():
        yield


@pytest.fixture(scope="module", autouse=True)
def module_leak_check(rayfield_known_leaks: list[str]) -> Iterator[None]:
    """Each test module, once its clusters are stopped and its driver disconnected,
    leaves no thread, fd, child process or rayfield shared memory behind
    (:class:`rayfield.testing.LeakCheck`). The ``rayfield stop`` runs still under way are
    excluded exactly, by pid and fd (:func:`clusterutil.stops_in_flight`):
    :func:`clusters_stopped` awaits them and fails on one that did not succeed."""
    from rayfield.testing import LeakCheck

    check = LeakCheck(allow=rayfield_known_leaks)
    yield
    check.allow += [re.compile(pattern) for pattern in stops_in_flight()]
    check.check()


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
