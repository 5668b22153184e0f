"""Failed-launch backoff: doubling, capped, reset by a success; the policy skips
blocked types."""

from __future__ import annotations

import pytest

from rayfield.autoscaler.backoff import LaunchBackoff
from rayfield.autoscaler.decisions import NodeTypeSpec, NodeView, ScalingPolicy


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    b = LaunchBackoff(base_s=2.0, max_s=10.0)
    assert b.blocked(0.0) == {}
    assert [b.failed("gpu", 0.0, "quota") for _ in range(4)] == [2.0, 4.0, 8.0, 10.0]
    assert b.blocked(9.0) == {"gpu": 1.0}
    assert b.blocked(10.0) == {}
    assert b.report() == {"gpu": (4, "quota")}
    b.succeeded("gpu")
    assert b.report() == {} and b.failed("gpu", 20.0) == 2.0


def test_bad_bounds() -> None:
    with pytest.raises(ValueError, match="base_s"):
        LaunchBackoff(base_s=0)
    with pytest.raises(ValueError, match="base_s"):
        LaunchBackoff(base_s=5, max_s=1)


def test_the_policy_launches_no_blocked_type() -> None:
    types = {
        "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
        "gpu": NodeTypeSpec({"CPU": 4.0, "GPU": 1.0}, 1, 4, "g"),
        "cpu": NodeTypeSpec({"CPU": 4.0}, 0, 4, "c"),
    }
    policy = ScalingPolicy(types, "head", max_workers=8)
    head = NodeView("h", "head", is_head=True, launch_hash="h", total={"CPU": 0.0})
    demand = [{"CPU": 4.0, "GPU": 1.0}] * 2 + [{"CPU": 4.0}]
    assert policy.decide([head], demand, 0.0).launch == {"gpu": 2, "cpu": 1}
    d = policy.decide([head], demand, 0.0, blocked={"gpu"})
    assert d.launch == {"cpu": 1}  # min_workers and the GPU demand wait
    assert d.unplaced == [{"CPU": 4.0, "GPU": 1.0}] * 2 and d.infeasible == []
