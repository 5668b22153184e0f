"""``rayfield memory``: what the object stores hold, by size, and why."""

from __future__ import annotations

from typing import Any

import click

from rayfield.cli._common import (
    Cluster,
    cluster_options,
    console,
    format_option,
    human_bytes,
    limit_option,
    print_json,
    print_table,
)

OBJECT_COLUMNS = [
    ("object_id", "OBJECT ID"),
    ("size", "SIZE"),
    ("node", "NODE"),
    ("owner_pid", "OWNER PID"),
    ("reason", "HELD BECAUSE"),
]
NODE_COLUMNS = [
    ("address", "NODE"),
    ("num_objects", "OBJECTS"),
    ("used", "STORE USED"),
    ("capacity", "CAPACITY"),
    ("percent", "USED %"),
    ("num_spilled", "SPILLED"),
]


def node_totals(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per alive, reachable node: address, node_id, store_used, store_capacity (bytes),
    num_objects and num_spilled."""
    keys = ("address", "node_id", "store_used", "store_capacity", "num_objects", "num_spilled")
    return [{k: n[k] for k in keys} for n in nodes if n["alive"] and n.get("reachable")]


@click.command()
@cluster_options
@format_option(["text", "json"], "text")
@limit_option("objects")
def memory(cluster: Cluster, fmt: str, limit: int) -> None:
    """Show the objects in the cluster's object stores, largest first: size, node, the
    pid of the process that created it (its owner) and why it is held (pinned by its
    owner's references, in use by a reader's buffer, spilled to disk, or only cached and
    evictable), then each node's store totals.

    An object held longer than expected usually has a live ObjectRef in its owner
    process: the owner pid says which process to look at.
    """
    with cluster.state() as client:
        objects = client.objects(max_per_node=limit)
        totals = node_totals(client.nodes())
    if limit:
        objects = objects[:limit]
    total = sum(n["num_objects"] for n in totals)
    if fmt == "json":
        print_json({"objects": objects, "nodes": totals})
        return
    out = console()
    rows = [{**o, "size": human_bytes(o["size_bytes"])} for o in objects]
    print_table(OBJECT_COLUMNS, rows, title="Objects, largest first", out=out)
    shown = f"the largest {len(objects)} of {total}" if total > len(objects) else str(total)
    used = human_bytes(sum(n["store_used"] for n in totals))
    out.print(f"{shown} objects shown; {used} in use in {len(totals)} store(s)\n")
    node_rows = [
        {
            **n,
            "used": human_bytes(n["store_used"]),
            "capacity": human_bytes(n["store_capacity"]),
            "percent": f"{100 * n['store_used'] / max(1, n['store_capacity']):.1f}",
        }
        for n in totals
    ]
    print_table(NODE_COLUMNS, node_rows, title="Object stores", out=out)
