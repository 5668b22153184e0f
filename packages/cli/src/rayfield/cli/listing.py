"""``rayfield list KIND``: the cluster's nodes, actors, jobs, tasks, objects or workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from rayfield.cli._common import (
    Cluster,
    cluster_options,
    format_option,
    human_bytes,
    limit_option,
    print_json,
    print_table,
)

# Per kind: the table's columns as (key of the display row, header).
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "nodes": [
        ("node_id", "NODE ID"),
        ("address", "ADDRESS"),
        ("state", "STATE"),
        ("cpu", "CPU %"),
        ("memory", "MEMORY USED/TOTAL"),
        ("store", "STORE USED/CAPACITY"),
        ("num_workers", "WORKERS"),
        ("tasks_running", "RUNNING"),
        ("tasks_queued", "QUEUED"),
        ("resources", "RESOURCES"),
    ],
    "actors": [
        ("actor_id", "ACTOR ID"),
        ("class_name", "CLASS"),
        ("name", "NAME"),
        ("state", "STATE"),
        ("node", "NODE"),
        ("pid", "PID"),
    ],
    "jobs": [
        ("job_id", "JOB ID"),
        ("state", "STATE"),
        ("driver_pid", "DRIVER PID"),
        ("node", "NODE"),
        ("started", "STARTED"),
        ("duration", "DURATION"),
        ("entrypoint", "ENTRYPOINT"),
    ],
    "tasks": [
        ("task_id", "TASK ID"),
        ("name", "NAME"),
        ("state", "STATE"),
        ("node", "NODE"),
        ("pid", "PID"),
        ("actor_id", "ACTOR ID"),
        ("duration", "DURATION"),
    ],
    "objects": [
        ("object_id", "OBJECT ID"),
        ("size", "SIZE"),
        ("node", "NODE"),
        ("owner_pid", "OWNER PID"),
        ("reason", "HELD BECAUSE"),
    ],
    "workers": [
        ("pid", "PID"),
        ("node", "NODE"),
        ("state", "STATE"),
        ("actor_id", "ACTOR ID"),
        ("cpu_percent", "CPU %"),
        ("rss", "RSS"),
        ("uptime", "UP"),
    ],
}


def _display(kind: str, r: dict[str, Any]) -> dict[str, Any]:
    """The record ``r`` of ``kind`` with the formatted fields its table shows added."""
    d = dict(r)
    if kind == "nodes":
        d["node_id"] = r["node_id"][:12]
        d["state"] = "ALIVE" if r["alive"] else f"DEAD ({r.get('death_reason') or 'stopped'})"
        if r.get("reachable"):
            d["cpu"] = f"{r['cpu_percent']:.0f}"
            d["memory"] = f"{human_bytes(r['memory_used'])}/{human_bytes(r['memory_total'])}"
            d["store"] = f"{human_bytes(r['store_used'])}/{human_bytes(r['store_capacity'])}"
        elif r["alive"]:
            d["state"] = f"ALIVE, unreachable ({r.get('error')})"
        d["resources"] = ", ".join(
            f"{r['resources_available'].get(k, 0):g}/{v:g} {k}"
            for k, v in sorted(r["resources_total"].items())
        )
    elif kind == "jobs":
        d["started"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["start_s"]))
        d["duration"] = f"{(r['end_s'] or time.time()) - r['start_s']:.0f} s"
    elif kind == "tasks":
        d["duration"] = None if r.get("end_s") is None else f"{r['duration_s'] * 1000:.1f} ms"
    elif kind == "objects":
        d["size"] = human_bytes(r["size_bytes"])
    elif kind == "workers":
        d["cpu_percent"] = f"{r['cpu_percent']:.0f}"
        d["rss"] = human_bytes(r["rss_bytes"])
        d["uptime"] = f"{max(0.0, time.time() - r['started_s']):.0f} s"
    return d


def parse_filters(values: tuple[str, ...]) -> list[tuple[str, str]]:
    """``key=value`` pairs of ``--filter``.

    Raises:
        click.BadParameter: for a value without ``=`` or with an empty key.
    """
    out = []
    for v in values:
        key, sep, want = v.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{v!r} is not key=value, e.g. --filter state=ALIVE", param_hint="--filter"
            )
        out.append((key.strip(), want))
    return out


def _matches(record: dict[str, Any], key: str, want: str) -> bool:
    value = record.get(key)
    if isinstance(value, bool):
        return str(value).lower() == want.lower()
    return ("" if value is None else str(value)) == want


def apply_filters(
    kind: str, records: list[dict[str, Any]], filters: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The records of ``kind`` whose field ``key`` equals ``value`` for every filter (a bool
    field matches true/false in any case; a missing value matches the empty string).

    Raises:
        click.BadParameter: when a filter names a field no record of ``kind`` has.
    """
    known = {k for r in records for k in r} | {k for k, _ in COLUMNS[kind]}
    for key, _ in filters:
        if key not in known:
            raise click.BadParameter(
                f"{kind} have no field {key!r}; fields: {', '.join(sorted(known))}",
                param_hint="--filter",
            )
    return [r for r in records if all(_matches(r, k, v) for k, v in filters)]


FETCH: dict[str, Callable[[Any, int], list[dict[str, Any]]]] = {
    "nodes": lambda c, _limit: c.nodes(),
    "actors": lambda c, _limit: c.actors(),
    "jobs": lambda c, _limit: c.jobs(),
    "tasks": lambda c, limit: c.tasks(limit),
    "objects": lambda c, _limit: c.objects(),
    "workers": lambda c, _limit: c.workers(),
}


@click.command(name="list")
@click.argument("kind", type=click.Choice(list(COLUMNS)))
@cluster_options
@format_option(["table", "json"], "table")
@limit_option("rows")
@click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keep only the rows whose field KEY equals VALUE (repeatable: all must hold). "
    "Fields are those of the JSON output, e.g. state=ALIVE, node=127.0.0.1:40123, "
    "name=f, class_name=Counter.",
)
def list_(cluster: Cluster, kind: str, fmt: str, limit: int, filters: tuple[str, ...]) -> None:
    """List the cluster's nodes, actors, jobs, tasks, objects or workers.

    \b
    nodes    every node, alive or dead, with its load, store use and resources
    actors   every actor: class, name, state, node and worker pid
    jobs     every driver that connected: state, pid, node, start, command line
    tasks    running tasks (from the nodes), then finished and failed ones (task events),
             the most recent first
    objects  objects in every node's store, largest first, with owner pid and why held
    workers  worker processes of every node: state, actor, CPU and resident memory
    """
    wanted = parse_filters(filters)
    with cluster.state() as client:
        # Tasks: the GCS keeps at most the last `limit` events when filtering is not asked.
        records = FETCH[kind](client, 0 if wanted else limit)
    records = apply_filters(kind, records, wanted)
    if kind == "tasks":  # running ones first, then the most recently finished
        records.sort(key=lambda t: (t["state"] != "RUNNING", -(t.get("end_s") or 0)))
    total = len(records)
    if limit:
        records = records[:limit]
    if fmt == "json":
        print_json(records)
        return
    print_table(COLUMNS[kind], [_display(kind, r) for r in records])
    shown = f"{len(records)} of {total}" if total > len(records) else str(total)
    click.echo(f"{shown} {kind}" + (" (--limit 0 shows all)" if total > len(records) else ""))
