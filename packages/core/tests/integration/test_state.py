"""State API, timeline, profile, runtime context, worker output, custom serializers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import rayfield as rf
from rayfield.testing import wait_for


def test_timeline_has_every_task_with_its_phases(cluster: Any, tmp_path: Path) -> None:
    @rf.remote
    def work(x: int) -> int:
        time.sleep(0.05)
        return x

    @rf.remote
    class Actor:
        def call(self) -> int:
            return 1

    rf.get([work.remote(i) for i in range(4)])
    a = Actor.remote()
    rf.get(a.call.remote())
    with rf.profile("driver-span", {"name": "custom label", "cname": "good"}):
        time.sleep(0.01)
    out = tmp_path / "trace.json"

    def complete() -> list[Any]:
        trace = rf.timeline(str(out))
        running = [e for e in trace if e["args"].get("phase") == "running"]
        return trace if len(running) >= 6 else []

    trace = wait_for(complete, 10, "the timeline to show all 6 tasks and calls")
    loaded = json.loads(out.read_text())
    assert loaded == trace
    work_running = [e for e in trace if e["name"] == "work" and e["cat"] == "task"]
    assert len(work_running) == 4 and all(e["dur"] >= 40_000 for e in work_running)
    phases = {e["args"].get("phase") for e in trace if e["cat"] == "task"}
    assert {"queued", "fetching arguments", "running", "storing results"} <= phases
    assert any(e["cat"] == "actor_call" and e["name"] == "Actor.call" for e in trace)
    [span] = [e for e in trace if e["cat"] == "profile"]
    assert span["name"] == "custom label" and span["tid"] == os.getpid()
    assert {e["ph"] for e in trace} == {"X"}


def test_state_listings(cluster: Any) -> None:
    @rf.remote
    def ok() -> int:
        return 1

    @rf.remote
    def bad() -> None:
        raise ValueError("no")

    @rf.remote
    class Keeper:
        def ping(self) -> int:
            return 1

    rf.get(ok.remote())
    with pytest.raises(ValueError):
        rf.get(bad.remote())
    keeper = Keeper.remote()
    rf.get(keeper.ping.remote())
    [node] = rf.nodes()
    assert node["Alive"] and node["Resources"]["CPU"] == 2.0
    assert rf.cluster_resources()["CPU"] == 2.0
    wait_for(lambda: rf.available_resources().get("CPU") == 2.0, 10, "both CPUs free")

    def finished() -> list[dict[str, Any]]:
        done = [t for t in rf.tasks() if t["name"] in ("ok", "bad")]
        return done if len(done) == 2 else []

    tasks = wait_for(finished, 10, "the tasks ok and bad in rf.tasks()")
    assert {(t["name"], t["state"]) for t in tasks} == {("ok", "FINISHED"), ("bad", "FAILED")}
    actors = wait_for(rf.actors, 10, "the actor in rf.actors()")
    assert [(a["class_name"], a["state"]) for a in actors] == [("Keeper", "ALIVE")]
    ref = rf.put(b"x" * 1000)
    sizes = {o["object_id"]: o["size_bytes"] for o in rf.objects()}
    assert sizes[ref.hex()] >= 1000
    assert rf.state.pending_tasks()["infeasible"] == []


def test_util_state_is_the_one_api_on_the_embedded_runtime(cluster: Any) -> None:
    """rayfield.util.state answers for the node init() started (no GCS), with the same
    records as on a cluster; rayfield.state's listings are the same functions' answers."""
    from rayfield.util import state

    @rf.remote
    class Counter:
        def add(self) -> int:
            return 1

    counter = Counter.remote()
    rf.get(counter.add.remote())
    [node] = state.list_nodes()
    assert node["alive"] and node["resources_total"]["CPU"] == 2.0 and node["reachable"]
    [actor] = wait_for(state.list_actors, 10, "the actor in util.state.list_actors()")
    assert (actor["class_name"], actor["state"]) == ("Counter", "ALIVE")
    assert [w["actor_id"] for w in state.list_workers() if w["state"] == "actor"] == [
        actor["actor_id"]
    ]
    calls = wait_for(
        lambda: [t for t in state.list_tasks() if t["name"] == "Counter.add"], 10, "the call"
    )
    assert calls[0]["state"] == "FINISHED" and calls[0]["actor_id"] == actor["actor_id"]
    assert {t["task_id"] for t in rf.tasks()} >= {t["task_id"] for t in calls}
    assert any(f["name"].startswith("events-") for f in state.list_logs())
    with pytest.raises(state.StateError, match="no GCS"):
        state.StateClient.embedded(rf._private.context.current().node).kv_get("ns", "k")
    rf.kill(counter)
    wait_for(lambda: [a["state"] for a in state.list_actors()] == ["DEAD"], 10, "the actor DEAD")


def test_list_named_actors(cluster: Any) -> None:
    @rf.remote
    class Named:
        def ping(self) -> int:
            return 1

    alpha = Named.options(name="alpha").remote()
    beta = Named.options(name="beta", namespace="other").remote()
    plain = Named.remote()
    rf.get([alpha.ping.remote(), beta.ping.remote(), plain.ping.remote()])
    assert rf.util.list_named_actors() == ["alpha"]
    assert rf.util.list_named_actors(all_namespaces=True) == [
        {"name": "alpha", "namespace": ""},
        {"name": "beta", "namespace": "other"},
    ]
    rf.kill(alpha)
    wait_for(lambda: rf.util.list_named_actors() == [], 10, "alpha gone from the list")


def test_a_named_actor_is_listed_before_its_constructor_ran(cluster: Any, tmp_path: Path) -> None:
    """Names are listed from creation on, whether the driver or a task created the actor
    (the embedded runtime has no GCS to record them)."""
    go = tmp_path / "go"

    @rf.remote(num_cpus=0)
    class Slow:
        def __init__(self, flag: str) -> None:
            while not os.path.exists(flag):
                time.sleep(0.01)

        def ping(self) -> int:
            return 1

    @rf.remote
    def make(flag: str) -> Any:
        return Slow.options(name="gamma", namespace="inner").remote(flag)

    delta = Slow.options(name="delta").remote(str(go))
    assert rf.util.list_named_actors() == ["delta"]
    gamma = rf.get(make.remote(str(go)))
    assert {"name": "gamma", "namespace": "inner"} in rf.util.list_named_actors(all_namespaces=True)
    [row] = [a for a in rf.util.state.list_actors() if a["name"] == "delta"]
    assert (row["class_name"], row["state"]) == ("Slow", "PENDING_CREATION")
    go.touch()
    assert rf.get([delta.ping.remote(), gamma.ping.remote()]) == [1, 1]
    wait_for(
        lambda: (
            {a["name"]: a["state"] for a in rf.util.state.list_actors() if a["name"]}
            == {"delta": "ALIVE", "gamma": "ALIVE"}
        ),
        10,
        "both ALIVE",
    )
    rf.kill(delta)
    rf.kill(gamma)
    wait_for(lambda: rf.util.list_named_actors(all_namespaces=True) == [], 10, "both gone")


def test_runtime_context(cluster: Any) -> None:
    ctx = rf.get_runtime_context()
    assert not ctx.is_worker and ctx.task_id is None and ctx.worker_pid == os.getpid()

    @rf.remote
    def where() -> dict[str, Any]:
        return rf.get_runtime_context().get()

    info = rf.get(where.remote())
    assert info["is_worker"] and info["task_id"] and info["worker_pid"] != os.getpid()
    assert info["node_id"] == ctx.node_id


def test_worker_output_reaches_the_driver_with_a_prefix(
    cluster: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    @rf.remote
    def talk() -> int:
        print("hello from a worker")
        return os.getpid()

    pid = rf.get(talk.remote())
    out = wait_for(lambda: capfd.readouterr().out, 10, "the worker's output")
    assert f"(pid={pid}, ip=127.0.0.1) hello from a worker" in out


def test_custom_serializer_is_used_in_workers(cluster: Any) -> None:
    class Point:
        def __init__(self, x: int, y: int) -> None:
            self.x, self.y = x, y

    rf.register_custom_serializer(
        Point, serializer=lambda p: (p.x, p.y, "custom"), deserializer=lambda t: Point(*t[:2])
    )

    @rf.remote
    def shift(p: Point) -> Point:
        return Point(p.x + 1, p.y + 1)

    q = rf.get(shift.remote(Point(1, 2)))
    assert (q.x, q.y) == (2, 3)
    with pytest.raises(ValueError):
        rf.register_custom_serializer(Point)


def test_workers_import_what_the_driver_can(tmp_path: Path) -> None:
    (tmp_path / "driver_only_mod.py").write_text("def square(x):\n    return x * x\n")
    sys.path.insert(0, str(tmp_path))
    rf.init(num_cpus=1, object_store_memory=64 << 20, temp_dir=str(tmp_path))
    try:
        import driver_only_mod  # type: ignore[import-not-found]

        @rf.remote
        def call(f: Any, x: int) -> int:
            return f(x)

        assert rf.get(call.remote(driver_only_mod.square, 7), timeout=30) == 49
    finally:
        rf.shutdown()
        sys.path.remove(str(tmp_path))


def test_local_state_calls_import_neither_grpc_nor_asyncio(tmp_path: Path) -> None:
    # nodes() and cluster_resources() of a local node, in the driver and in a worker
    # (Tune asks both for every trial), read the node itself: gRPC and asyncio (0.1-0.5 s
    # of imports per process) are only for clusters and async code.
    code = (
        "import sys, rayfield as rf\n"
        f"rf.init(num_cpus=1, object_store_memory=64 << 20, temp_dir={str(tmp_path)!r})\n"
        "@rf.remote\n"
        "def worker_side():\n"
        "    import sys, rayfield as rf\n"
        "    rf.nodes(), rf.cluster_resources()\n"
        "    return sorted(m for m in ('grpc', 'asyncio') if m in sys.modules)\n"
        "assert rf.nodes()[0]['Alive'] and rf.cluster_resources()['CPU'] == 1.0\n"
        "assert rf.get(worker_side.remote(), timeout=60) == [], 'imported in the worker'\n"
        "assert not {'grpc', 'asyncio'} & set(sys.modules), 'imported in the driver'\n"
        "rf.shutdown()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
