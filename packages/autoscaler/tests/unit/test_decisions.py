"""The pure scaling policy: one test per rule, plus the mix and the speed of one step."""

from __future__ import annotations

from collections import Counter

import pytest

from rayfield.autoscaler.decisions import (
    IdleTracker,
    NodeTypeSpec,
    NodeView,
    ScalingPolicy,
)

CPU1 = {"CPU": 1.0}


def policy(**kw: object) -> ScalingPolicy:
    types = kw.pop(
        "types",
        {
            "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
            "small": NodeTypeSpec({"CPU": 2.0}, 0, 10, "s"),
            "big": NodeTypeSpec({"CPU": 8.0}, 0, 10, "b"),
            "gpu": NodeTypeSpec({"CPU": 4.0, "GPU": 1.0}, 0, 4, "g"),
        },
    )
    args = {"max_workers": 20, "idle_timeout_s": 60.0, "upscaling_speed": 100.0}
    args.update(kw)
    return ScalingPolicy(types, "head", **args)  # type: ignore[arg-type]


HEAD = NodeView("head-1", "head", is_head=True, launch_hash="h", total={"CPU": 0.0})


def worker(node_id: str, node_type: str = "small", used: float = 0.0, **kw: object) -> NodeView:
    cpus = {"small": 2.0, "big": 8.0, "gpu": 4.0}[node_type]
    total = {"CPU": cpus, **({"GPU": 1.0} if node_type == "gpu" else {})}
    available = dict(total, CPU=cpus - used)
    args = {
        "launch_hash": node_type[0],
        "total": total,
        "available": available,
        "idle_since": None if used else 0.0,
    }
    args.update(kw)
    return NodeView(node_id, node_type, **args)  # type: ignore[arg-type]


def test_nothing_to_do_on_an_idle_cluster_at_its_minimum() -> None:
    d = policy().decide([HEAD], [], now=10.0)
    assert d.launch == {} and d.terminate == [] and d.infeasible == []


def test_min_workers_are_launched() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 1.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0}, 2, 5, "s"),
    }
    d = policy(types=types).decide([HEAD, worker("w1")], [], now=0.0)
    assert d.launch == {"small": 1}


def test_demand_fills_free_capacity_before_launching() -> None:
    nodes = [HEAD, worker("w1", used=1.0)]
    d = policy().decide(nodes, [CPU1], now=0.0)
    assert d.launch == {}
    d = policy().decide(nodes, [CPU1, CPU1], now=0.0)
    assert d.launch == {"small": 1}


def test_pending_nodes_count_with_their_full_resources() -> None:
    pending = worker("w2", "big", pending=True, idle_since=None)
    d = policy().decide([HEAD, pending], [CPU1] * 8, now=0.0)
    assert d.launch == {}


def test_a_cold_cluster_gets_the_whole_mix_in_one_step() -> None:
    demand = [{"CPU": 1.0}] * 8000 + [{"CPU": 1.0, "GPU": 1.0}] * 3 + [{"CPU": 6.0}] * 2
    d = policy(
        max_workers=2000,
        types={
            "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
            "small": NodeTypeSpec({"CPU": 2.0}, 0, 2000, "s"),
            "big": NodeTypeSpec({"CPU": 8.0}, 0, 2000, "b"),
            "gpu": NodeTypeSpec({"CPU": 4.0, "GPU": 1.0}, 0, 4, "g"),
        },
    ).decide([HEAD], demand, now=0.0)
    # The whole plan is decided at once: what upscaling_speed holds back now waits.
    plan = Counter(d.launch) + Counter(d.waiting)
    # GPU shapes on GPU nodes (with 3 CPU:1 tasks beside each); the 6-CPU shapes on big
    # nodes; the rest of the CPU:1 tasks fill big nodes, the last few a small one.
    assert plan["gpu"] == 3
    total_cpus = 8 * plan["big"] + 2 * plan["small"] + 4 * 3
    assert total_cpus >= 8000 + 3 + 12
    assert total_cpus - (8000 + 3 + 12) < 2  # the only slack is within the last small node
    assert d.unplaced == [] and d.infeasible == []
    # upscaling_speed 100 holds each type to 100 pending nodes: only big nodes wait.
    assert d.launch == {"gpu": 3, "big": 100, "small": plan["small"]}
    assert d.waiting == {"big": plan["big"] - 100}


def test_each_shape_goes_to_the_type_it_fits_best() -> None:
    d = policy().decide([HEAD], [{"CPU": 2.0}], now=0.0)
    assert d.launch == {"small": 1}  # fully used, beats a quarter-used big node
    d = policy().decide([HEAD], [{"GPU": 1.0}], now=0.0)
    assert d.launch == {"gpu": 1}


def test_infeasible_shapes_are_reported_not_launched_for() -> None:
    d = policy().decide([HEAD], [{"CPU": 64.0}, {"TPU": 1.0}, CPU1], now=0.0)
    assert d.infeasible == [{"CPU": 64.0}, {"TPU": 1.0}]
    assert d.launch == {"small": 1}


def test_max_workers_per_type_and_global_bound_launches() -> None:
    d = policy().decide([HEAD], [{"GPU": 1.0}] * 10, now=0.0)
    assert d.launch == {"gpu": 4}
    assert d.unplaced == [{"GPU": 1.0}] * 6 and d.infeasible == []
    d = policy(max_workers=3).decide([HEAD], [{"CPU": 8.0}] * 5, now=0.0)
    assert d.launch == {"big": 3}


def test_workers_over_max_are_terminated_idle_first() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0}, 0, 1, "s"),
    }
    nodes = [HEAD, worker("busy", used=2.0), worker("idle", idle_since=5.0)]
    d = policy(types=types).decide(nodes, [], now=6.0)
    assert d.terminate == [("idle", "max-workers")]
    d = policy(types=types, max_workers=0).decide(nodes, [], now=6.0)
    assert sorted(d.terminate) == [("busy", "max-workers"), ("idle", "max-workers")]


def test_outdated_and_unknown_type_workers_are_terminated() -> None:
    nodes = [HEAD, worker("old", launch_hash="stale"), worker("gone", "small")]
    nodes[2] = NodeView("gone", "removed-type", launch_hash="x")
    d = policy().decide(nodes, [], now=0.0)
    assert ("old", "outdated") in d.terminate and ("gone", "unknown-type") in d.terminate


def test_idle_workers_go_after_the_timeout_down_to_min_workers() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0}, 1, 5, "s"),
    }
    nodes = [HEAD, worker("a", idle_since=0.0), worker("b", idle_since=10.0), worker("c", used=1)]
    p = policy(types=types, idle_timeout_s=60.0)
    assert p.decide(nodes, [], now=59.0).terminate == []
    assert p.decide(nodes, [], now=65.0).terminate == [("a", "idle")]
    d = p.decide(nodes, [], now=100.0)
    assert d.terminate == [("a", "idle"), ("b", "idle")]
    only_idle = [HEAD, worker("a", idle_since=0.0), worker("b", idle_since=10.0)]
    assert p.decide(only_idle, [], now=100.0).terminate == [("a", "idle")]  # min_workers 1


def test_idle_workers_that_demand_lands_on_are_kept() -> None:
    nodes = [HEAD, worker("a", idle_since=0.0)]
    d = policy().decide(nodes, [CPU1], now=1000.0)
    assert d.terminate == [] and d.launch == {}


def test_the_head_is_never_removed() -> None:
    idle_head = NodeView("head-1", "head", is_head=True, launch_hash="stale", idle_since=0.0)
    d = policy(max_workers=0).decide([idle_head], [], now=1e6)
    assert d.terminate == []


def test_load_rule_adds_workers_above_the_target_utilization() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 2.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0}, 0, 5, "s"),
    }
    head = NodeView("head-1", "head", True, False, "h", {"CPU": 2.0}, {"CPU": 0.0})
    busy = worker("w", used=2.0)
    p = policy(types=types, target_utilization_fraction=0.8)
    # Two fully used nodes: ceil(2 / 0.8) = 3 nodes wanted.
    assert p.decide([head, busy], [], now=0.0).launch == {"small": 1}
    # At 1.0 the same load wants no more nodes; half-used nodes want none either.
    assert (
        policy(types=types, target_utilization_fraction=1.0)
        .decide([head, busy], [], now=0.0)
        .launch
        == {}
    )
    half = worker("w", used=1.0)
    half_head = NodeView("head-1", "head", True, False, "h", {"CPU": 2.0}, {"CPU": 1.0})
    assert p.decide([half_head, half], [], now=0.0).launch == {}


def test_load_rule_keeps_idle_workers_the_target_needs() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 2.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0}, 0, 5, "s"),
    }
    head = NodeView("head-1", "head", True, False, "h", {"CPU": 2.0}, {"CPU": 0.0})
    p = policy(types=types, target_utilization_fraction=0.5)
    d = p.decide([head, worker("idle", idle_since=0.0)], [], now=1e6)
    assert d.terminate == []  # 1 busy node / 0.5 = 2 nodes wanted


def test_upscaling_speed_caps_pending_launches_per_node_type() -> None:
    demand = [{"CPU": 8.0}] * 20
    types = {
        "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0, "fast": 1.0}, 0, 40, "s"),
        "big": NodeTypeSpec({"CPU": 8.0}, 0, 40, "b"),
    }
    slow = policy(types=types, upscaling_speed=1.0, max_workers=100)
    d = slow.decide([HEAD], demand, now=0.0)
    assert d.launch == {"big": 5} and d.waiting == {"big": 15}  # at least 5 at once
    # Running nodes of another type do not raise the cap of this one.
    smalls = [worker(f"s{i}", used=2.0) for i in range(9)]
    d = slow.decide([HEAD, *smalls], demand, now=0.0)
    assert d.launch == {"big": 5}
    # 10 running big nodes x 1.0 allow 10 pending; 4 already are.
    bigs = [worker(f"b{i}", "big", used=8.0) for i in range(10)]
    pending = [worker(f"p{i}", "big", pending=True, idle_since=None) for i in range(4)]
    d = slow.decide([HEAD, *bigs, *pending], demand, now=0.0)
    assert d.launch == {"big": 6} and d.waiting == {"big": 10}
    half = policy(types=types, upscaling_speed=0.5, max_workers=100)
    assert half.decide([HEAD, *bigs], demand, now=0.0).launch == {"big": 5}
    # Each type has its own cap: 5 big and 5 small nodes in one step.
    d = slow.decide([HEAD], demand + [{"fast": 1.0}] * 7, now=0.0)
    assert d.launch == {"big": 5, "small": 5} and d.waiting == {"big": 15, "small": 2}


def test_min_workers_launches_are_not_held_back_by_upscaling_speed() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0}, 8, 10, "s"),
    }
    d = policy(types=types, upscaling_speed=1.0).decide([HEAD], [], now=0.0)
    assert d.launch == {"small": 8} and d.waiting == {}


def test_requested_resources_launch_with_no_demand_and_persist() -> None:
    p = policy(upscaling_speed=1.0)
    d = p.decide([HEAD], [], now=0.0, requested=[CPU1] * 16)
    assert d.launch == {"big": 2}  # two fully used big nodes hold 16 CPUs
    # Bundles count against the nodes' total resources, busy or not: once launched, the
    # same request launches nothing more, even with every CPU in use.
    busy = [worker(f"b{i}", "big", used=8.0) for i in range(2)]
    d = p.decide([HEAD, *busy], [], now=0.0, requested=[CPU1] * 16)
    assert d.launch == {} and d.terminate == []
    # Idle nodes that hold a request are kept past the idle timeout...
    idle = [worker(f"b{i}", "big", idle_since=0.0) for i in range(2)]
    assert p.decide([HEAD, *idle], [], now=1e6, requested=[CPU1] * 16).terminate == []
    # ...and removed once the request is cleared.
    d = p.decide([HEAD, *idle], [], now=1e6, requested=[])
    assert sorted(d.terminate) == [("b0", "idle"), ("b1", "idle")]


def test_requested_resources_bypass_upscaling_speed_and_report_infeasible() -> None:
    d = policy(upscaling_speed=1.0).decide([HEAD], [], now=0.0, requested=[{"CPU": 8.0}] * 7)
    assert d.launch == {"big": 7} and d.waiting == {}
    d = policy().decide([HEAD], [], now=0.0, requested=[{"TPU": 1.0}, {"GPU": 1.0}])
    assert d.infeasible == [{"TPU": 1.0}] and d.launch == {"gpu": 1}
    # Queued demand uses the requested nodes too: no extra launch for it.
    d = policy().decide([HEAD], [CPU1] * 8, now=0.0, requested=[{"CPU": 8.0}])
    assert d.launch == {"big": 1}


def test_lost_workers_are_terminated_and_replaced() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
        "small": NodeTypeSpec({"CPU": 2.0}, 2, 5, "s"),
    }
    p = policy(types=types, heartbeat_timeout_s=30.0)
    fine = worker("fine", last_heartbeat=95.0)
    silent = worker("silent", last_heartbeat=60.0)
    d = p.decide([HEAD, fine, silent], [], now=100.0)
    assert d.terminate == [("silent", "lost")] and d.launch == {"small": 1}
    # A node the cluster declared dead goes at once; pending nodes have no heartbeat yet.
    dead = worker("dead", last_heartbeat=99.0, dead=True)
    pending = worker("new", pending=True, idle_since=None)
    d = p.decide([HEAD, dead, pending], [], now=100.0)
    assert d.terminate == [("dead", "lost")] and d.launch == {"small": 1}
    # The head is never removed, lost or not.
    lost_head = NodeView("head-1", "head", is_head=True, launch_hash="h", dead=True)
    assert p.decide([lost_head, fine, worker("w2")], [], now=100.0).terminate == []


def test_decisions_are_stable_once_applied() -> None:
    p = policy()
    d = p.decide([HEAD], [CPU1, CPU1, CPU1], now=0.0)
    assert d.launch == {"small": 2}
    launched = [worker(f"n{i}", pending=True, idle_since=None) for i in range(2)]
    again = p.decide([HEAD, *launched], [CPU1, CPU1, CPU1], now=1.0)
    assert again.launch == {} and again.terminate == []


def test_bad_policy_arguments() -> None:
    with pytest.raises(ValueError, match="head_node_type"):
        ScalingPolicy({"a": NodeTypeSpec({})}, "b", 1)
    with pytest.raises(ValueError, match="target_utilization_fraction"):
        ScalingPolicy({"a": NodeTypeSpec({})}, "a", 1, target_utilization_fraction=0)
    with pytest.raises(ValueError, match="upscaling_speed"):
        ScalingPolicy({"a": NodeTypeSpec({})}, "a", 1, upscaling_speed=0)
    with pytest.raises(ValueError, match="heartbeat_timeout_s"):
        ScalingPolicy({"a": NodeTypeSpec({})}, "a", 1, heartbeat_timeout_s=0)


def test_idle_tracker() -> None:
    t = IdleTracker()
    t.observe("a", {"CPU": 2}, {"CPU": 2}, now=1.0)
    t.observe("a", {"CPU": 2}, {"CPU": 2}, now=5.0)
    assert t.idle_since("a") == 1.0
    t.observe("a", {"CPU": 2}, {"CPU": 1}, now=6.0)
    assert t.idle_since("a") is None
    t.observe("a", {"CPU": 2}, {"CPU": 2}, now=7.0)
    assert t.idle_since("a") == 7.0
    t.forget([])
    assert t.idle_since("a") is None
