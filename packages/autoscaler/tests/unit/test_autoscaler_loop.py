"""The autoscaler loop (observe, decide, apply) over an in-memory provider, with injected
load, demand and clock: no process."""

from __future__ import annotations

from typing import Any

from memory_provider import MemoryProvider

from rayfield.autoscaler.autoscaler import (
    Autoscaler,
    demand_from_queued_tasks,
    demand_from_rows,
    reported_idle_since,
)
from rayfield.autoscaler.config import launch_hash, prepare_config
from rayfield.autoscaler.node_provider import (
    TAG_LAUNCH_CONFIG,
    TAG_NODE_KIND,
    TAG_NODE_TYPE,
)


def config() -> dict[str, Any]:
    return prepare_config(
        {
            "cluster_name": "t",
            "provider": {"type": "local_process"},
            "idle_timeout_minutes": 1,
            "head_node_type": "head",
            "available_node_types": {
                "head": {"resources": {"CPU": 0}},
                "worker": {"resources": {"CPU": 1}, "min_workers": 1, "max_workers": 3},
            },
        }
    )


class Cluster:
    """What the load function reports: rows of the nodes that joined, busy or not."""

    def __init__(self, provider: MemoryProvider) -> None:
        self.provider = provider
        self.joined: set[str] = set()
        self.busy: set[str] = set()
        self.dead: set[str] = set()  # joined, then declared dead by the GCS
        self.queued = 0

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for node_id in sorted(self.joined & set(self.provider.nodes)):
            total = {k: float(v) for k, v in self.provider.nodes[node_id]["resources"].items()}
            available = {k: 0.0 for k in total} if node_id in self.busy else dict(total)
            out.append(
                {
                    "node_id": f"cluster-{node_id}",
                    "alive": node_id not in self.dead,
                    "resources_total": total,
                    "resources_available": available,
                    "tasks_queued": self.queued if node_id == "n0" else 0,
                }
            )
        return out


def setup() -> tuple[MemoryProvider, Cluster, list[float], Autoscaler]:
    cfg = config()
    provider = MemoryProvider()
    provider.create_node(
        {"resources": {"CPU": 0}},
        {TAG_NODE_KIND: "head", TAG_NODE_TYPE: "head", TAG_LAUNCH_CONFIG: launch_hash(cfg, "head")},
        1,
    )
    cluster = Cluster(provider)
    cluster.joined.add("n0")
    clock = [0.0]
    return provider, cluster, clock, Autoscaler(cfg, provider, cluster.rows, clock=lambda: clock[0])


def test_loop_scales_up_on_queued_demand_and_down_after_idle_timeout() -> None:
    provider, cluster, clock, autoscaler = setup()
    assert autoscaler.update().launch == {"worker": 1}  # min_workers
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n1"]
    assert autoscaler.update().launch == {}  # n1 pending: counted, not launched again
    cluster.joined.add("n1")
    cluster.busy.add("n1")
    cluster.queued = 2
    assert autoscaler.update().launch == {"worker": 2}
    cluster.joined |= {"n2", "n3"}
    cluster.busy |= {"n2", "n3"}
    cluster.queued = 0
    assert autoscaler.update().launch == {}
    assert autoscaler.next_step_in(5.0) == 5.0  # nothing idle: the loop's interval
    cluster.busy.clear()
    clock[0] = 10.0
    assert autoscaler.update().terminate == []  # idle, not for 60 s yet
    assert autoscaler.next_step_in(5.0) == 5.0  # idle until 70: not within 5 s
    clock[0] = 67.5
    assert autoscaler.update().terminate == []
    assert autoscaler.next_step_in(5.0) == 2.5  # woken at the idle timeout, not at 72.5
    clock[0] = 71.0
    decision = autoscaler.update()
    assert sorted(node for node, _ in decision.terminate) == ["n1", "n2"]
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n3"]  # min_workers 1
    assert "n0" in provider.nodes  # the head stays
    assert autoscaler.next_step_in(5.0) == 5.0  # n3's deadline is past (min_workers)


def test_outdated_workers_are_replaced() -> None:
    provider, _, _, autoscaler = setup()
    autoscaler.update()
    provider.set_node_tags("n1", {TAG_LAUNCH_CONFIG: "old"})
    decision = autoscaler.update()
    assert decision.terminate == [("n1", "outdated")] and decision.launch == {"worker": 1}
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n2"]


def test_a_failing_node_type_is_backed_off_then_retried() -> None:
    provider, _, clock, autoscaler = setup()
    provider.fail = True
    assert autoscaler.update().launch == {"worker": 1}
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == []
    clock[0] = 4.0  # within the first backoff (5 s): not launched again
    assert autoscaler.update().launch == {}
    clock[0] = 5.0
    assert autoscaler.update().launch == {"worker": 1}  # fails again: 10 s now
    clock[0] = 14.0
    assert autoscaler.update().launch == {}
    assert autoscaler.backoff.report() == {"worker": (2, "no capacity")}
    provider.fail = False
    clock[0] = 15.0
    autoscaler.update()
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n1"]
    assert autoscaler.backoff.report() == {}


def test_injected_demand_function() -> None:
    provider, cluster, _, _ = setup()
    shapes = [{"CPU": 1.0}] * 3
    autoscaler = Autoscaler(config(), provider, cluster.rows, lambda rows: shapes, lambda: 0.0)
    assert autoscaler.update().launch == {"worker": 3}


def test_default_demand_takes_the_shapes_nodes_report() -> None:
    rows = [
        {
            "alive": True,
            "tasks_queued": 3,
            "demand": [
                {"shape": {"CPU": 2, "GPU": 1}, "count": 2, "infeasible": True},
                {"shape": {"CPU": 1}, "count": 1, "infeasible": False},
            ],
        },
        {"alive": False, "demand": [{"shape": {"CPU": 8}, "count": 4, "infeasible": False}]},
        {"alive": True, "tasks_queued": 1},  # no shapes reported: counted as CPU 1 each
    ]
    assert demand_from_rows(rows) == [
        {"CPU": 2.0, "GPU": 1.0},
        {"CPU": 2.0, "GPU": 1.0},
        {"CPU": 1.0},
        {"CPU": 1.0},
    ]


def test_task_counts_give_one_cpu_a_queued_task_of_alive_nodes() -> None:
    rows = [
        {"alive": True, "tasks_queued": 2, "tasks_infeasible": 1},
        {"alive": False, "tasks_queued": 5},
        {"alive": True, "tasks_queued": 0},
        {"alive": True},  # not reachable: no counts
    ]
    assert demand_from_queued_tasks(rows) == [{"CPU": 1.0}] * 3


class DeferredExecutor:
    """Runs what is submitted only when told to (a stand-in for launch threads)."""

    def __init__(self) -> None:
        self.queued: list[tuple[Any, tuple[Any, ...]]] = []

    def submit(self, fn: Any, *args: Any) -> None:
        self.queued.append((fn, args))

    def run_all(self) -> None:
        for fn, args in self.queued:
            fn(*args)
        self.queued.clear()


def test_launches_run_in_the_executor() -> None:
    provider, cluster, clock, _ = setup()
    executor = DeferredExecutor()
    shapes = [{"CPU": 1.0}] * 2
    autoscaler = Autoscaler(
        config(),
        provider,
        cluster.rows,
        lambda rows: shapes,
        lambda: clock[0],
        executor,  # type: ignore[arg-type]
    )
    assert autoscaler.update().launch == {"worker": 2}
    assert len(executor.queued) == 2
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == []  # not run yet
    executor.run_all()
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n1", "n2"]
    provider.fail = True
    shapes.append({"CPU": 1.0})
    assert autoscaler.update().launch == {"worker": 1}
    executor.run_all()  # the failure is logged, not raised into the executor
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n1", "n2"]


def test_a_worker_the_cluster_declares_dead_is_replaced() -> None:
    provider, cluster, _, autoscaler = setup()
    autoscaler.update()  # min_workers: n1
    cluster.joined.add("n1")
    assert autoscaler.update().terminate == []
    cluster.dead.add("n1")
    decision = autoscaler.update()
    assert decision.terminate == [("n1", "lost")] and decision.launch == {"worker": 1}
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n2"]


def test_a_silent_worker_is_replaced_after_the_heartbeat_timeout() -> None:
    provider, cluster, clock, _ = setup()
    wall = [1000.0]
    autoscaler = Autoscaler(
        config(),
        provider,
        lambda: [
            dict(r, last_heartbeat_s=beats.get(r["node_id"], wall[0])) for r in cluster.rows()
        ],
        clock=lambda: clock[0],
        wall_clock=lambda: wall[0],
        heartbeat_timeout_s=10.0,
    )
    beats: dict[str, float] = {}
    autoscaler.update()
    cluster.joined.add("n1")
    beats["cluster-n1"] = 1000.0  # n1's heartbeats stop at wall time 1000
    clock[0], wall[0] = 5.0, 1005.0
    assert autoscaler.update().terminate == []
    clock[0], wall[0] = 11.0, 1011.0
    decision = autoscaler.update()
    assert decision.terminate == [("n1", "lost")] and decision.launch == {"worker": 1}


def test_requests_and_reports_go_through_the_injected_functions() -> None:
    provider, cluster, clock, _ = setup()
    requested = [{"CPU": 1.0}] * 3
    reports: list[dict[str, Any]] = []
    autoscaler = Autoscaler(
        config(),
        provider,
        cluster.rows,
        clock=lambda: clock[0],
        requests_fn=lambda: requested,
        publish_fn=reports.append,
    )
    assert autoscaler.update().launch == {"worker": 3}  # max_workers 3
    assert reports[-1]["requested"] == [{"shape": {"CPU": 1.0}, "count": 3}]
    assert reports[-1]["launching"] == {"worker": 3}


def test_a_started_worker_the_cluster_forgot_is_lost_after_the_timeout() -> None:
    provider, cluster, clock, _ = setup()
    autoscaler = Autoscaler(
        config(), provider, cluster.rows, clock=lambda: clock[0], heartbeat_timeout_s=10.0
    )
    autoscaler.update()  # n1 launched; it has a cluster id but never shows up in the rows
    clock[0] = 5.0
    assert autoscaler.update().terminate == []
    clock[0] = 16.0
    assert autoscaler.update().terminate == [("n1", "lost")]


def test_reported_idle_since_counts_back_from_the_heartbeat() -> None:
    row = {"idle_duration_s": 30.0, "last_heartbeat_s": 1000.0}
    assert reported_idle_since(row, now=50.0, wall=1002.0) == 50.0 - 2.0 - 30.0
    assert reported_idle_since({**row, "idle_duration_s": 0.0}, 50.0, 1002.0) is None
    assert reported_idle_since({**row, "last_heartbeat_s": 1005.0}, 50.0, 1002.0) == 20.0


def test_scale_down_follows_the_idle_time_nodes_report() -> None:
    provider, cluster, clock, _ = setup()
    wall = [5000.0]
    reported: dict[str, float] = {}

    def rows() -> list[dict[str, Any]]:
        out = cluster.rows()
        for r in out:
            r["last_heartbeat_s"] = wall[0] - 0.5
            r["idle_duration_s"] = reported.get(r["node_id"], 0.0)
        return out

    cfg = config()
    autoscaler = Autoscaler(cfg, provider, rows, clock=lambda: clock[0], wall_clock=lambda: wall[0])
    provider.create_node({"resources": {"CPU": 1}}, autoscaler_tags(cfg), 3)
    cluster.joined |= {"n1", "n2", "n3"}
    # Every CPU is free on all three; n1 says it has been idle 59 s, n2 that it is busy
    # (e.g. it holds an actor that needs no CPU: free resources alone miss that), n3
    # that it became idle just now.
    reported["cluster-n1"] = 59.0
    assert autoscaler.update().terminate == []  # idle 59.5 s at the first look: not 60
    assert autoscaler.next_step_in(5.0) == 0.5  # woken at its timeout
    clock[0] += 0.5
    wall[0] += 0.5
    reported["cluster-n1"] = 59.5
    assert [node for node, _ in autoscaler.update().terminate] == ["n1"]
    clock[0] += 600.0
    wall[0] += 600.0
    reported["cluster-n3"] = 600.0
    decision = autoscaler.update()
    assert [node for node, _ in decision.terminate] == ["n3"]  # n2 stays: it is busy
    assert provider.non_terminated_nodes({TAG_NODE_KIND: "worker"}) == ["n2"]


def autoscaler_tags(cfg: dict[str, Any]) -> dict[str, str]:
    return {
        TAG_NODE_KIND: "worker",
        TAG_NODE_TYPE: "worker",
        TAG_LAUNCH_CONFIG: launch_hash(cfg, "worker"),
    }
