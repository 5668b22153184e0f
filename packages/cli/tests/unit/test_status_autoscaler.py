"""``rayfield status``'s rendering of an autoscaler report (pure: no cluster)."""

from __future__ import annotations

from rayfield.cli.status import autoscaler_lines


def test_the_autoscaler_view_names_nodes_failures_demand_and_reasons() -> None:
    report = {
        "version": 1,
        "cluster_name": "c",
        "time_s": 100.0,
        "nodes": [
            {"node_id": "head-1", "node_type": "head", "state": "head"},
            {"node_id": "w-1", "node_type": "cpu", "state": "running"},
            {"node_id": "w-2", "node_type": "cpu", "state": "pending"},
            {"node_id": "w-3", "node_type": "cpu", "state": "lost"},
        ],
        "launching": {"cpu": 1},
        "waiting": {"cpu": 4},
        "failed": [
            {"node_type": "gpu", "failures": 3, "last_error": "no capacity", "retry_in_s": 20.0}
        ],
        "terminated": [{"node_id": "w-3", "reason": "lost"}],
        "demand": [{"shape": {"CPU": 1.0}, "count": 7}],
        "requested": [],
        "infeasible": [{"shape": {"TPU": 1.0}, "count": 2, "reason": "no node type has TPU"}],
        "unplaced": [],
    }
    text = "\n".join(autoscaler_lines(report, now=102.5))
    assert "autoscaler of 'c' (report 2.5 s old)" in text
    assert "pending: w-2 (cpu)" in text and "lost: w-3 (cpu)" in text
    assert "held back by upscaling_speed: 4 x cpu" in text
    assert "failed: 3 launch(es) of gpu in a row, retry in 20 s; last error: no capacity" in text
    assert "7 x 1 CPU" in text and "requested (request_resources): none" in text
    assert "infeasible: 2 x 1 TPU: no node type has TPU" in text
