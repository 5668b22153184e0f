"""Cluster-wide state (``rayfield.util.state``) on a two-node cluster started by the CLI.

The GCS gathers every node's task events; each node answers for its load, workers,
stored objects and log files over its token-guarded gRPC service.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

import rayfield as rf
from rayfield._private.transport import auth_metadata, open_channel
from rayfield.testing import wait_for
from rayfield.util import state
from rayfield.util.cluster import find_token


@rf.remote
def on_head(x: int) -> int:
    print(f"on_head says {x}")
    return x + 1


@rf.remote(resources={"b": 1})
def on_b(x: int) -> np.ndarray:
    print(f"on_b says {x}")
    return np.full(1_000_000, float(x))


@rf.remote(resources={"b": 1}, num_cpus=0)
class Greeter:
    def __init__(self) -> None:
        print("Greeter is up")

    def hello(self) -> str:
        return f"hello from {os.getpid()}"


@pytest.fixture(scope="module")
def workload(driver_cluster: tuple[str, Path]) -> dict[str, Any]:
    greeter = Greeter.remote()  # type: ignore[attr-defined]
    actor_pid = int(rf.get(greeter.hello.remote()).split()[-1])
    kept = rf.put(np.zeros(2_000_000))  # 16 MB, held by this driver
    # One at a time: queued ones could move to the other node's free CPU.
    assert [rf.get(on_head.remote(i)) for i in range(4)] == [1, 2, 3, 4]
    assert rf.get(on_b.remote(7))[0] == 7.0

    def shipped() -> bool:  # each worker's events reach the GCS on their own schedule
        names = [t["name"] for t in state.list_tasks() if t["state"] == "FINISHED"]
        return names.count("on_head") == 4 and {"on_b", "Greeter.__init__"} <= set(names)

    wait_for(shipped, 20, "the task events of both nodes in the GCS", interval=0.2)
    return {"greeter": greeter, "actor_pid": actor_pid, "kept": kept}


def test_nodes_show_live_load(driver_cluster: tuple[str, Path], workload: dict[str, Any]) -> None:
    nodes = state.list_nodes()
    assert len(nodes) == 2 and all(n["alive"] and n["reachable"] for n in nodes)
    for n in nodes:
        assert n["memory_total"] > n["memory_used"] > 0
        assert n["store_capacity"] > 0 and 0 <= n["cpu_percent"] <= 100 * (os.cpu_count() or 1)
        assert n["num_workers"] >= 1
    head = next(n for n in nodes if "b" not in n["resources_total"])
    assert head["store_used"] >= 16_000_000  # the driver's put lives on its node


def test_tasks_from_both_nodes_reach_the_gcs(workload: dict[str, Any]) -> None:
    finished = [t for t in state.list_tasks() if t["state"] == "FINISHED"]
    nodes_of = {
        name: {t["node"] for t in finished if t["name"] == name} for name in ("on_head", "on_b")
    }
    assert len(nodes_of["on_head"]) == 1 and len(nodes_of["on_b"]) == 1
    assert nodes_of["on_head"] != nodes_of["on_b"]
    assert sum(t["name"] == "on_head" for t in finished) == 4


def test_actor_listed_with_class_node_and_pid(workload: dict[str, Any]) -> None:
    [actor] = [a for a in state.list_actors() if a["class_name"] == "Greeter"]
    assert actor["state"] == "ALIVE" and actor["pid"] == workload["actor_pid"]
    b_node = next(n for n in state.list_nodes() if "b" in n["resources_total"])
    assert actor["node"] == b_node["address"]
    workers = state.list_workers()
    [host] = [w for w in workers if w["pid"] == workload["actor_pid"]]
    assert host["state"] == "actor" and host["actor_id"] == actor["actor_id"]
    assert host["rss_bytes"] > 1_000_000


def test_objects_show_size_owner_and_why_held(workload: dict[str, Any]) -> None:
    kept_hex = workload["kept"].hex()
    [obj] = [o for o in state.list_objects() if o["object_id"] == kept_hex]
    assert obj["size_bytes"] >= 16_000_000
    assert obj["owner_pid"] == os.getpid()
    assert obj["reason"].startswith("pinned")


def test_worker_logs_by_task_actor_and_pid(workload: dict[str, Any]) -> None:
    [task] = [t for t in state.list_tasks() if t["name"] == "on_b"]
    assert "on_b says 7" in state.get_log(task_id=task["task_id"])
    [actor] = [a for a in state.list_actors() if a["class_name"] == "Greeter"]
    assert "Greeter is up" in state.get_log(actor_id=actor["actor_id"])
    assert "Greeter is up" in state.get_log(pid=workload["actor_pid"])
    names = {f["name"] for f in state.list_logs()}
    assert f"worker-{workload['actor_pid']}.out" in names and "node.out" in names


def test_timeline_has_phases_on_both_nodes(workload: dict[str, Any], tmp_path: Path) -> None:
    trace = state.timeline(filename=str(tmp_path / "t.json"))
    phases = {e["args"]["phase"] for e in trace if e["cat"] == "task"}
    assert {"queued", "fetching arguments", "running", "storing results"} <= phases
    assert len({e["pid"] for e in trace}) == 2  # one row group per node
    assert (tmp_path / "t.json").stat().st_size > 100


def test_introspection_needs_the_token_and_serves_only_log_files(
    driver_cluster: tuple[str, Path], workload: dict[str, Any]
) -> None:
    from rayfield._private.node_manager.node_service import NodeStub

    address, temp_dir = driver_cluster
    node = state.list_nodes()[0]["address"]
    channel = open_channel(node, None, 1 << 20)
    wrong = NodeStub(channel, auth_metadata("0" * 64))
    with pytest.raises(grpc.RpcError) as err:
        wrong.introspect()
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    good = NodeStub(channel, auth_metadata(find_token(address, temp_dir)))
    for name in ("../token", "/etc/passwd", "..", "", "a/../../token"):
        with pytest.raises(grpc.RpcError) as err:
            good.read_log(name)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
    garbage = channel.unary_unary("/rayfield.Node/Introspect")
    with pytest.raises(grpc.RpcError) as err:
        garbage(b"\xff" * 40, metadata=good.metadata, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert good.introspect()["address"] == node  # still serving
    tail = good.read_log("node.out", offset=-10, max_bytes=10)
    assert (
        tail["found"]
        and len(tail["data"]) <= 10
        and tail["offset"] == tail["size"] - len(tail["data"])
    )
    channel.close()


def test_list_named_actors_covers_the_cluster(workload: dict[str, Any]) -> None:
    """Named actors of the cluster's GCS, whichever node hosts them."""

    @rf.remote(resources={"b": 1})
    class Remote:
        def ping(self) -> int:
            return 1

    far = Remote.options(name="far", lifetime="detached").remote()
    rf.get(far.ping.remote())
    assert "far" in rf.util.list_named_actors()
    assert {"name": "far", "namespace": ""} in rf.util.list_named_actors(all_namespaces=True)
    rf.kill(far)
    wait_for(
        lambda: "far" not in rf.util.list_named_actors(), 20, "far gone from the list", interval=0.2
    )
