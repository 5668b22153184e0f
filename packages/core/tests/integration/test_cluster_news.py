"""News that does not wait for the next periodic heartbeat, with real processes.

The head beats only every ``HEARTBEAT_S`` here (the GCS's liveness timeout is longer), so
anything the GCS or the other nodes hear from it within that time after its start came
through the paths under test: the early beat of a demand that grew, and the spillback
pass a node joining starts (``NODE_ALIVE``). Both checks end before the head's first
periodic beat could have carried the news.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rayfield as rf
from rayfield._private.gcs.client import GcsClient
from rayfield.testing import wait_for
from rayfield.util import cluster

HEARTBEAT_S = 60.0  # the head's period: no periodic beat falls within these tests


@rf.remote(resources={"y": 1}, num_cpus=0)
def needs_y() -> int:
    return 1


@rf.remote(resources={"x": 1}, num_cpus=0)
def needs_x() -> str:
    return "ran where x is"


@dataclass
class Cluster:
    gcs: GcsClient
    address: str
    token: str
    temp_dir: Path
    head_started: float  # monotonic: the head's first periodic beat is HEARTBEAT_S later

    def left_s(self) -> float:
        """Seconds until the head's first periodic beat could go, less a second of
        margin: what a check may wait."""
        left = self.head_started + HEARTBEAT_S - time.monotonic() - 1.0
        if left <= 0:
            pytest.fail(f"no time left before the head's first periodic beat ({HEARTBEAT_S} s)")
        return left


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A GCS and a head (1 CPU) that beats every ``HEARTBEAT_S``; this driver connected."""
    tmp = tmp_path_factory.mktemp("news")
    session = cluster.new_session_dir(tmp)
    try:
        opts = cluster.NodeOptions(temp_dir=tmp, heartbeat_timeout_s=3 * HEARTBEAT_S)
        address = cluster.start_gcs(session, "127.0.0.1", 0, opts)
        token = (session / "token").read_text().strip()
        opts = cluster.NodeOptions(num_cpus=1, temp_dir=tmp, heartbeat_s=HEARTBEAT_S)
        started = time.monotonic()
        cluster.start_node(session, address, token, opts, head=True)
        rf.init(address=address, temp_dir=str(tmp))
        with GcsClient(address, token, tls=False) as gcs:
            yield Cluster(gcs, address, token, tmp, started)
    finally:
        rf.shutdown()
        cluster.stop_all(5.0, temp_dir=tmp)


def _infeasible(gcs: GcsClient, resource: str) -> bool:
    return any(d.infeasible and resource in d.shape for n in gcs.get_nodes() for d in n.demand)


def test_an_infeasible_task_reaches_the_gcs_before_the_next_heartbeat(head: Cluster) -> None:
    assert not _infeasible(head.gcs, "y")
    submitted = time.monotonic()
    ref = needs_y.remote()
    wait_for(
        lambda: _infeasible(head.gcs, "y"),
        head.left_s(),  # past it, a periodic beat could have carried it
        "the infeasible task's demand in the head's GCS record",
    )
    print(f"infeasible demand in the GCS {1e3 * (time.monotonic() - submitted):.0f} ms after")
    rf.cancel(ref)


def test_a_task_waiting_for_a_resource_runs_as_soon_as_a_node_with_it_joins(
    head: Cluster,
) -> None:
    ref = needs_x.remote()
    wait_for(lambda: _infeasible(head.gcs, "x"), head.left_s(), "the task parked")
    opts = cluster.NodeOptions(num_cpus=1, resources={"x": 1}, temp_dir=head.temp_dir)
    cluster.start_node(cluster.new_session_dir(head.temp_dir), head.address, head.token, opts)
    joined = time.monotonic()
    assert rf.get(ref, timeout=head.left_s()) == "ran where x is"
    print(f"the task ran {1e3 * (time.monotonic() - joined):.0f} ms after its node joined")
