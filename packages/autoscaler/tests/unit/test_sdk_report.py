"""request_resources' checks and stored form, and the autoscaler's report (no cluster)."""

from __future__ import annotations

import json

import pytest

from rayfield.autoscaler.decisions import Decision, NodeTypeSpec, NodeView
from rayfield.autoscaler.report import build_report, infeasible_reason
from rayfield.autoscaler.sdk import parse_request, request_resources

TYPES = {
    "head": NodeTypeSpec({"CPU": 0.0}),
    "cpu": NodeTypeSpec({"CPU": 8.0}),
    "gpu": NodeTypeSpec({"CPU": 4.0, "GPU": 1.0}),
}


def test_request_resources_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="num_cpus must be an int"):
        request_resources(num_cpus=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_cpus must be >= 0"):
        request_resources(num_cpus=-1)
    with pytest.raises(TypeError, match="list of resource dicts"):
        request_resources(bundles={"CPU": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"bundles\[0\]\['GPU'\]"):
        request_resources(bundles=[{"GPU": -1}])


def test_request_resources_outside_a_cluster_says_how_to_connect() -> None:
    with pytest.raises(RuntimeError, match="needs a cluster"):
        request_resources(num_cpus=1)


def test_a_stored_request_expands_to_bundles() -> None:
    raw = json.dumps({"num_cpus": 2, "bundles": [{"GPU": 1}]}).encode()
    assert parse_request(raw) == [{"CPU": 1.0}, {"CPU": 1.0}, {"GPU": 1.0}]
    assert parse_request(None) == [] and parse_request(b"not json") == []
    assert parse_request(json.dumps({"num_cpus": 0, "bundles": []}).encode()) == []


def test_infeasible_reasons_name_the_resource() -> None:
    assert infeasible_reason({"TPU": 1.0}, TYPES) == "no node type has TPU"
    assert infeasible_reason({"CPU": 64.0}, TYPES) == (
        "needs 64 CPU; the most a node type has is 8"
    )
    assert infeasible_reason({"CPU": 6.0, "GPU": 1.0}, TYPES) == (
        "no single node type has all of 6 CPU, 1 GPU"
    )


def test_the_report_has_nodes_demand_requests_failures_and_reasons() -> None:
    views = [
        NodeView("h", "head", is_head=True),
        NodeView("w1", "cpu"),
        NodeView("w2", "cpu", pending=True),
        NodeView("w3", "cpu", dead=True),
    ]
    decision = Decision(
        launch={"cpu": 1},
        terminate=[("w3", "lost")],
        infeasible=[{"TPU": 1.0}] * 2,
        unplaced=[{"GPU": 1.0}],
    )
    report = build_report(
        "c",
        views,
        [{"CPU": 1.0}] * 3,
        [{"CPU": 1.0}] * 2,
        decision,
        TYPES,
        {"gpu": (2, "quota exceeded")},
        {"gpu": 9.96},
        123.0,
    )
    assert json.loads(json.dumps(report)) == report  # JSON as is
    assert [n["state"] for n in report["nodes"]] == ["head", "running", "pending", "lost"]
    assert report["demand"] == [{"shape": {"CPU": 1.0}, "count": 3}]
    assert report["requested"] == [{"shape": {"CPU": 1.0}, "count": 2}]
    assert report["infeasible"] == [
        {"shape": {"TPU": 1.0}, "count": 2, "reason": "no node type has TPU"}
    ]
    assert report["unplaced"][0]["reason"] == "backed off after failed launches: gpu"
    assert report["failed"] == [
        {"node_type": "gpu", "failures": 2, "last_error": "quota exceeded", "retry_in_s": 10.0}
    ]
    assert report["terminated"] == [{"node_id": "w3", "reason": "lost"}]
