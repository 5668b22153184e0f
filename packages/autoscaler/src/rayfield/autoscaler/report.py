"""The autoscaler's view of its cluster after one step, as a JSON-friendly dict: what
the monitor publishes in the GCS (``rayfield.autoscaler.sdk.STATUS_KEY``) for
``rayfield status``, and logs. Pure: everything comes in as arguments.

Report fields (version 1):
    ``cluster_name``; ``time_s`` (Unix seconds);
    ``nodes``: ``node_id``, ``node_type``, ``state`` (``head``, ``running``,
    ``pending``, ``lost``) of every node the provider has;
    ``launching``: node type -> nodes launched by this step; ``waiting``: launches held
    back by ``upscaling_speed``;
    ``failed``: node types whose launches keep failing: ``node_type``, ``failures`` (in
    a row), ``last_error``, ``retry_in_s``;
    ``terminated``: ``node_id`` and ``reason`` of what this step terminated;
    ``demand`` and ``requested``: ``shape`` (resource name -> amount) and ``count``;
    ``infeasible`` and ``unplaced``: the same with ``reason`` (why no node is launched).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rayfield.autoscaler.decisions import Decision, NodeTypeSpec, NodeView

__all__ = ["build_report", "infeasible_reason"]

VERSION = 1


def _fmt(shape: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(shape.items()))


def infeasible_reason(shape: Mapping[str, float], node_types: Mapping[str, NodeTypeSpec]) -> str:
    """Why no node type can hold ``shape``, in one line naming the resource."""
    for name, amount in sorted(shape.items()):
        if amount <= 0:
            continue
        most = max((t.resources.get(name, 0.0) for t in node_types.values()), default=0.0)
        if most <= 0:
            return f"no node type has {name}"
        if most < amount:
            return f"needs {amount:g} {name}; the most a node type has is {most:g}"
    return f"no single node type has all of {_fmt(shape)}"


def _counted(shapes: Sequence[Mapping[str, float]]) -> list[dict[str, Any]]:
    counts = Counter(tuple(sorted(s.items())) for s in shapes)
    return [{"shape": dict(k), "count": n} for k, n in counts.most_common()]


def build_report(
    cluster_name: str,
    views: Sequence[NodeView],
    demand: Sequence[Mapping[str, float]],
    requested: Sequence[Mapping[str, float]],
    decision: Decision,
    node_types: Mapping[str, NodeTypeSpec],
    failures: Mapping[str, tuple[int, str]],
    blocked: Mapping[str, float],
    time_s: float,
) -> dict[str, Any]:
    """The report of one step (fields in the module docstring).

    Args:
        cluster_name: the config's ``cluster_name``.
        views: the nodes as the step saw them.
        demand: the pending demand shapes; ``requested``: the requested bundles.
        decision: what the step decided.
        node_types: the policy's node types (for the infeasible reasons).
        failures: ``LaunchBackoff.report()``; ``blocked``: ``LaunchBackoff.blocked()``.
        time_s: the report's time, Unix seconds.
    """
    lost = {node_id for node_id, reason in decision.terminate if reason == "lost"}
    nodes = []
    for v in views:
        state = "head" if v.is_head else "pending" if v.pending else "running"
        if v.node_id in lost:
            state = "lost"
        nodes.append({"node_id": v.node_id, "node_type": v.node_type, "state": state})
    unplaced_why = (
        f"backed off after failed launches: {', '.join(sorted(blocked))}"
        if blocked
        else "max_workers reached"
    )
    return {
        "version": VERSION,
        "cluster_name": cluster_name,
        "time_s": time_s,
        "nodes": nodes,
        "launching": dict(decision.launch),
        "waiting": dict(decision.waiting),
        "failed": [
            {
                "node_type": t,
                "failures": n,
                "last_error": err,
                "retry_in_s": round(max(0.0, blocked.get(t, 0.0)), 1),
            }
            for t, (n, err) in sorted(failures.items())
        ],
        "terminated": [{"node_id": n, "reason": r} for n, r in decision.terminate],
        "demand": _counted(demand),
        "requested": _counted(requested),
        "infeasible": [
            {**entry, "reason": infeasible_reason(entry["shape"], node_types)}
            for entry in _counted(decision.infeasible)
        ],
        "unplaced": [{**e, "reason": unplaced_why} for e in _counted(decision.unplaced)],
    }
