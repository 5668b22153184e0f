"""``rayfield status``: nodes, resources and pending demand of a cluster, and the view of
its autoscaler when one runs (the report its monitor keeps in the GCS key-value store,
namespace ``autoscaler``, key ``status``: see ``rayfield.autoscaler.report``)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from rayfield.cli._common import Cluster, cluster_options, format_option

AUTOSCALER_NAMESPACE = "autoscaler"
AUTOSCALER_STATUS_KEY = b"status"


def autoscaler_lines(report: dict[str, Any], now: float) -> list[str]:
    """The text lines of an autoscaler report (``rayfield.autoscaler.report`` fields)."""
    age = max(0.0, now - float(report.get("time_s", now)))
    lines = [f"autoscaler of {report.get('cluster_name', '?')!r} (report {age:.1f} s old)"]
    states: dict[str, list[str]] = {}
    for n in report.get("nodes", []):
        states.setdefault(n["state"], []).append(f"{n['node_id']} ({n['node_type']})")
    for state in ("head", "running", "pending", "lost"):
        if state in states:
            lines.append(f"  {state}: {', '.join(states[state])}")
    for key, what in (("launching", "launching"), ("waiting", "held back by upscaling_speed")):
        if report.get(key):
            counts = ", ".join(f"{n} x {t}" for t, n in sorted(report[key].items()))
            lines.append(f"  {what}: {counts}")
    for f in report.get("failed", []):
        lines.append(
            f"  failed: {f['failures']} launch(es) of {f['node_type']} in a row, "
            f"retry in {f['retry_in_s']:g} s; last error: {f['last_error']}"
        )
    for t in report.get("terminated", []):
        lines.append(f"  terminated: {t['node_id']} ({t['reason']})")
    for key, what in (("demand", "demand"), ("requested", "requested (request_resources)")):
        entries = report.get(key, [])
        lines.append(f"  {what}" + ("" if entries else ": none"))
        lines += [f"    {e['count']} x {_fmt(e['shape'])}" for e in entries]
    for key in ("infeasible", "unplaced"):
        for e in report.get(key, []):
            lines.append(f"  {key}: {e['count']} x {_fmt(e['shape'])}: {e['reason']}")
    return lines


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(resources.items())) or "-"


@click.command()
@cluster_options
@format_option(["text", "json"], "text")
def status(cluster: Cluster, fmt: str) -> None:
    """Show the cluster's nodes (alive or dead), total and used resources, and the
    pending demand: queued and infeasible work by resource shape."""
    with cluster.state() as client:
        address = client.address
        nodes = client.node_records()
        raw_report = client.kv_get(AUTOSCALER_NAMESPACE, AUTOSCALER_STATUS_KEY)
    if fmt == "json":
        click.echo(json.dumps(nodes, indent=2))
        return
    alive = [n for n in nodes if n["alive"]]
    click.echo(f"cluster {address}: {len(alive)} node(s) alive, {len(nodes) - len(alive)} dead")
    now = time.time()
    for n in nodes:
        state = "alive" if n["alive"] else f"dead ({n['death_reason'] or 'stopped'})"
        click.echo(f"  {n['node_id'][:12]}  {n['address']:21}  {state}")
        if n["alive"]:
            total, available = n["resources_total"], n["resources_available"]
            used = {k: v - available.get(k, 0.0) for k, v in total.items()}
            click.echo(
                f"      total {_fmt(total)}; used {_fmt(used)}; "
                f"last heartbeat {max(0.0, now - n['last_heartbeat_s']):.1f} s ago"
            )
    total_all: dict[str, float] = {}
    used_all: dict[str, float] = {}
    demand: dict[tuple[Any, bool], int] = {}
    for n in alive:
        for k, v in n["resources_total"].items():
            total_all[k] = total_all.get(k, 0.0) + v
            used_all[k] = used_all.get(k, 0.0) + v - n["resources_available"].get(k, 0.0)
        for d in n["demand"]:
            key = (tuple(sorted(d["shape"].items())), d["infeasible"])
            demand[key] = demand.get(key, 0) + d["count"]
    click.echo("resources")
    for k in sorted(total_all):
        click.echo(f"  {used_all[k]:g}/{total_all[k]:g} {k} used")
    click.echo("pending demand" + ("" if demand else ": none"))
    for (shape, infeasible), count in sorted(demand.items(), key=lambda kv: -kv[1]):
        kind = "infeasible (no node has it)" if infeasible else "queued"
        click.echo(f"  {count} x {_fmt(dict(shape))}: {kind}")
    if raw_report:
        try:
            report = json.loads(raw_report)
        except ValueError:
            report = None
        if isinstance(report, dict):
            for line in autoscaler_lines(report, now):
                click.echo(line)
