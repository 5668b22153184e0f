"""``rayfield status``: nodes, resources and pending demand of a cluster."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from rayfield.cli._common import Cluster, cluster_options, format_option, translate_errors


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(resources.items())) or "-"


@click.command()
@cluster_options
@format_option(["text", "json"], "text")
def status(cluster: Cluster, fmt: str) -> None:
    """Show the cluster's nodes (alive or dead), total and used resources, and the
    pending demand: queued and infeasible work by resource shape."""
    from rayfield._private.gcs.client import GcsClient

    address, token = cluster.resolve()
    gcs = GcsClient(address, token, retry_deadline_s=5)
    try:
        with translate_errors(address):
            nodes = gcs.get_nodes()
    finally:
        gcs.close()
    if fmt == "json":
        click.echo(json.dumps([_node_dict(n) for n in nodes], indent=2))
        return
    alive = [n for n in nodes if n.alive]
    click.echo(f"cluster {address}: {len(alive)} node(s) alive, {len(nodes) - len(alive)} dead")
    now = time.time()
    for n in nodes:
        state = "alive" if n.alive else f"dead ({n.death_reason or 'stopped'})"
        click.echo(f"  {n.node_id.hex()[:12]}  {n.address:21}  {state}")
        if n.alive:
            used = {k: v - n.resources_available.get(k, 0.0) for k, v in n.resources_total.items()}
            click.echo(
                f"      total {_fmt(n.resources_total)}; used {_fmt(used)}; "
                f"last heartbeat {max(0.0, now - n.last_heartbeat_s):.1f} s ago"
            )
    total: dict[str, float] = {}
    used_all: dict[str, float] = {}
    demand: dict[tuple[Any, bool], int] = {}
    for n in alive:
        for k, v in n.resources_total.items():
            total[k] = total.get(k, 0.0) + v
            used_all[k] = used_all.get(k, 0.0) + v - n.resources_available.get(k, 0.0)
        for d in n.demand:
            key = (tuple(sorted(d.shape.items())), d.infeasible)
            demand[key] = demand.get(key, 0) + d.count
    click.echo("resources")
    for k in sorted(total):
        click.echo(f"  {used_all[k]:g}/{total[k]:g} {k} used")
    click.echo("pending demand" + ("" if demand else ": none"))
    for (shape, infeasible), count in sorted(demand.items(), key=lambda kv: -kv[1]):
        kind = "infeasible (no node has it)" if infeasible else "queued"
        click.echo(f"  {count} x {_fmt(dict(shape))}: {kind}")


def _node_dict(n: Any) -> dict[str, Any]:
    return {
        "node_id": n.node_id.hex(),
        "address": n.address,
        "alive": n.alive,
        "death_reason": n.death_reason,
        "hostname": n.hostname,
        "resources_total": n.resources_total,
        "resources_available": n.resources_available,
        "demand": [
            {"shape": d.shape, "count": d.count, "infeasible": d.infeasible} for d in n.demand
        ],
        "last_heartbeat_s": n.last_heartbeat_s,
    }
