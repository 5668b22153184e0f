"""The public cluster API (``rayfield.util.cluster``, ``rayfield.util.state``,
``rayfield.experimental.internal_kv``) against a two-node cluster started by the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

import rayfield as rf
from rayfield.experimental import internal_kv as kv
from rayfield.testing import wait_for
from rayfield.util import cluster, state


@rf.remote
def kv_from_a_worker(key: str) -> bytes | None:
    return kv._internal_kv_get(key, namespace="shared")


def test_finding_the_cluster_and_its_token(driver_cluster: tuple[str, Path]) -> None:
    address, temp_dir = driver_cluster
    assert cluster.find_gcs_address(temp_dir) == address
    assert cluster.resolve_address("auto", temp_dir) == address
    assert cluster.resolve_address(address) == address
    token = cluster.find_token(address, temp_dir)
    assert len(bytes.fromhex(token)) == 32
    session = cluster.head_session(temp_dir)
    assert session is not None
    record = cluster.read_session_json(session / "cluster.json")
    assert record is not None and record["gcs_address"] == address
    assert cluster.read_session_json(session / "no-such.json") is None
    commands = [" ".join(p.cmdline()) for p in cluster.rayfield_processes(temp_dir)]
    assert len(commands) == 3  # the GCS and two nodes
    with pytest.raises(cluster.ClusterError, match="no token for the cluster"):
        cluster.find_token("127.0.0.1:1", temp_dir)


def test_internal_kv_has_ray_semantics(driver_cluster: tuple[str, Path]) -> None:
    assert kv._internal_kv_initialized()
    assert kv._internal_kv_put("a/1", b"one") is False  # new
    assert kv._internal_kv_put("a/1", b"uno", overwrite=False) is True  # existed, kept
    assert kv._internal_kv_get("a/1") == b"one"
    assert kv._internal_kv_put(b"a/1", "eins") is True  # existed, replaced
    assert kv._internal_kv_get(b"a/1") == b"eins"
    kv._internal_kv_put("a/2", b"two")
    kv._internal_kv_put("b/1", b"x")
    assert kv._internal_kv_list("a/") == [b"a/1", b"a/2"]
    assert kv._internal_kv_exists("b/1") and not kv._internal_kv_exists("b/2")
    assert kv._internal_kv_get("a/1", namespace="other") is None
    assert kv._internal_kv_del("a/", del_by_prefix=True) == 2
    assert kv._internal_kv_del("b/1") == 1 and kv._internal_kv_del("b/1") == 0
    assert kv._internal_kv_list("") == []
    with pytest.raises(TypeError, match="bytes or str"):
        kv._internal_kv_put("k", 3)  # type: ignore[arg-type]
    kv._internal_kv_put("seen", b"by workers", namespace="shared")
    assert rf.get(kv_from_a_worker.remote("seen")) == b"by workers"


def test_resource_demand_shows_what_no_node_fits(driver_cluster: tuple[str, Path]) -> None:
    ref = kv_from_a_worker.options(resources={"nowhere": 2}).remote("x")

    def infeasible() -> list[dict[str, object]]:
        return [d for d in state.resource_demand() if d["infeasible"]]

    [row] = wait_for(infeasible, 20, "the infeasible task in the nodes' demand", interval=0.2)
    assert row["shape"] == {"CPU": 1.0, "nowhere": 2.0} and row["count"] == 1
    assert row["address"] in {n["address"] for n in state.list_nodes() if n["alive"]}
    rf.cancel(ref)


def test_state_client_records_and_events(driver_cluster: tuple[str, Path]) -> None:
    address, temp_dir = driver_cluster
    rf.get(kv_from_a_worker.remote("y"))
    with state.StateClient(address, temp_dir=temp_dir) as client:
        records = client.node_records()
        assert len(records) == 2 and all(r["alive"] for r in records)
        assert {"node_id", "address", "demand", "resources_total"} <= set(records[0])
        assert client.kv_put("public-api", "k", b"v") is True
        assert client.kv_get("public-api", "k") == b"v"
        assert client.kv_del("public-api", "k") is True
    events = wait_for(
        lambda: [e for e in state.list_task_events() if e.get("name") == "kv_from_a_worker"],
        20,
        "the task's event in the GCS",
        interval=0.2,
    )
    assert events[0]["kind"] == "task"


def test_a_node_call_error_has_a_status() -> None:
    assert issubclass(state.NodeCallError, Exception)
    assert state.call_status(ValueError("plain")) == ("UNKNOWN", "plain")
