"""``rayfield status``: nodes, resources and pending demand of a cluster."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from rayfield.cli._common import Cluster, cluster_options, format_option


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
