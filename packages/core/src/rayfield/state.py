"""The classic state functions (``rayfield.nodes()``, ``cluster_resources()``,
``timeline()``, ...), built on the one state API, :mod:`rayfield.util.state`.

``list_tasks``, ``list_actors``, ``list_objects`` and ``timeline`` are
``rayfield.util.state``'s, for this driver's cluster or, without one, the node its
``init()`` started. ``nodes`` keeps Ray's classic record format (``NodeID``, ``Alive``,
``Resources``...); the resource totals are the GCS's (at most a heartbeat, 0.5 s, old) in
a cluster. ``pending_tasks`` is about this driver's node. Tasks and actor calls are
listed once they finish (from the task events every process writes).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

from rayfield._private import context
from rayfield._private.runtime import runtime as _rt

__all__ = [
    "actors",
    "available_resources",
    "cluster_resources",
    "list_actors",
    "list_nodes",
    "list_objects",
    "list_tasks",
    "nodes",
    "objects",
    "pending_tasks",
    "profile",
    "tasks",
    "timeline",
]


def _logs_dir() -> str:
    ctx = context.current()
    if ctx is not None and ctx.info.get("session_dir"):
        return os.path.join(ctx.info["session_dir"], "logs")
    logs = os.environ.get("RAYFIELD_LOGS_DIR")
    if logs:
        return logs
    raise RuntimeError("rayfield is not initialized: call rayfield.init() first")


def _node() -> Any:
    ctx = context.current()
    if ctx is None or ctx.node is None:
        raise RuntimeError("pending_tasks() runs in the driver whose init() started the node")
    return ctx.node


def _state() -> Any:
    """:mod:`rayfield.util.state`, imported on first use: it brings gRPC (0.1-0.5 s of
    imports), which ``nodes()`` and ``cluster_resources()`` on a local node never need."""
    from rayfield.util import state

    return state


def _flush_own_events() -> None:
    ev = _rt.get_runtime().events
    if ev is not None:
        ev.flush()


def _cluster() -> str | None:
    """The GCS address of this process's cluster; None for a local ``init()``."""
    return context.gcs_address()


def _gcs_nodes(address: str) -> list[Any]:
    from rayfield._private.driver.names import client

    return list(client(address).get_nodes())


def list_nodes() -> list[dict[str, Any]]:
    """One dict per node, alive or dead: ``NodeID``, ``Alive`` (also ``alive``),
    ``NodeManagerAddress``, ``NodeManagerPort``, ``NodeManagerHostname``,
    ``ObjectStoreSocketName``, ``Resources`` (totals), ``Available``, ``ObjectStore``
    (store statistics; this driver's node only, else None), ``idle_duration_s`` (in a
    cluster: the seconds the node had been idle at its last heartbeat, 0.0 while busy,
    see ``rayfield.util.state.list_nodes``; None for a node outside a cluster, which
    reports to no one).

    Raises:
        rayfield._private.protocol.errors.GcsError: in a cluster whose GCS cannot be reached.
    """
    rt = _rt.get_runtime()
    address = _cluster()
    if address is None:
        state = rt.client.node_state()
        return [
            {
                "NodeID": rt.client.node_id.hex(),
                "Alive": not rt.client.closed,
                "alive": not rt.client.closed,
                "NodeManagerAddress": "127.0.0.1",
                "NodeManagerPort": 0,
                "NodeManagerHostname": socket.gethostname(),
                "ObjectStoreSocketName": rt.socket_path,
                "Resources": state["total"],
                "Available": state["available"],
                "ObjectStore": rt.client.stats(),
                "idle_duration_s": None,
            }
        ]
    out = []
    for n in _gcs_nodes(address):
        host, _, port = n.address.rpartition(":")
        mine = n.node_id == rt.client.node_id
        out.append(
            {
                "NodeID": n.node_id.hex(),
                "Alive": n.alive,
                "alive": n.alive,
                "NodeManagerAddress": host,
                "NodeManagerPort": int(port or 0),
                "NodeManagerHostname": n.hostname,
                "ObjectStoreSocketName": n.socket_path,
                "Resources": dict(n.resources_total),
                "Available": dict(n.resources_available) if n.alive else {},
                "ObjectStore": rt.client.stats() if mine else None,
                "idle_duration_s": n.idle_duration_s,
            }
        )
    return out


def _summed(field: str) -> dict[str, float]:
    address = _cluster()
    if address is None:
        return dict(_rt.get_runtime().client.node_state()[field])
    out: dict[str, float] = {}
    for n in _gcs_nodes(address):
        if n.alive:
            values = n.resources_total if field == "total" else n.resources_available
            for k, v in values.items():
                out[k] = out.get(k, 0.0) + v
    return out


def cluster_resources() -> dict[str, float]:
    """Total resources of the cluster's alive nodes, by name. Resources reserved by
    placement groups count in their plain names (a reservation is in use, as in Ray) and
    also under their group names (``CPU_group_<pg>``...)."""
    from rayfield._private.common.placement_groups import with_reserved

    return with_reserved(_summed("total"))


def available_resources() -> dict[str, float]:
    """Resources not in use right now on the cluster's alive nodes, by name."""
    return _summed("available")


def list_tasks() -> list[dict[str, Any]]:
    """Tasks and actor calls: RUNNING ones, then FINISHED and FAILED ones (``task_id``,
    ``name``, ``state``, ``actor_id``, ``pid``, ``node``, ``duration_s``...): the records
    of :func:`rayfield.util.state.list_tasks` for this driver's cluster or node."""
    _flush_own_events()
    return _state().list_tasks()


def pending_tasks() -> dict[str, Any]:
    """Work not running yet: ready tasks by resource shape, tasks waiting for
    dependencies, infeasible tasks with the reason, queued actor calls."""
    snap = _node().server.scheduler_snapshot()
    return {
        "ready_by_shape": [(dict(shape), n) for shape, n in snap["ready_by_shape"]],
        "waiting_for_dependencies": snap["waiting_for_dependencies"],
        "infeasible": [
            {"task_id": t.hex(), "demand": d, "reason": r} for t, d, r in snap["infeasible"]
        ],
        "actor_tasks_queued": snap.get("actor_tasks_queued", 0),
        "running": snap["running"],
    }


def list_actors() -> list[dict[str, Any]]:
    """Actors created so far: ``actor_id``, ``class_name``, ``pid``, ``state`` (ALIVE,
    DEAD, RESTARTING or PENDING_CREATION), ``name``, ``node``...: the records of
    :func:`rayfield.util.state.list_actors` for this driver's cluster or node."""
    _flush_own_events()
    return _state().list_actors()


def list_objects() -> list[dict[str, Any]]:
    """Objects in the stores of this driver's cluster or node, largest first:
    ``object_id``, ``size_bytes``, ``node``, ``owner_pid``, ``ref_count``, ``spilled``,
    ``reason`` (why it is held)...: :func:`rayfield.util.state.list_objects`."""
    return _state().list_objects()


def timeline(filename: str | None = None) -> list[dict[str, Any]]:
    """Every finished task and actor call, by phase (queued, fetching arguments, running,
    storing results), and every ``profile()`` span, in Chrome tracing format.

    Args:
        filename: also write the events there as JSON (open in chrome://tracing or
            https://ui.perfetto.dev).
    """
    _flush_own_events()
    return _state().timeline(filename=filename)


@contextlib.contextmanager
def profile(event_type: str, extra_data: dict[str, str] | None = None) -> Iterator[None]:
    """Record a span named `event_type` in the timeline, in the driver or in a task.

    ``extra_data`` (str -> str) shows in the trace viewer; its keys ``name`` and ``cname``
    set the box's label and colour.
    """
    start = time.time()
    try:
        yield
    finally:
        ev = _rt.get_runtime().events
        if ev is not None:
            ev.record(
                {
                    "kind": "profile",
                    "name": event_type,
                    "start": start,
                    "end": time.time(),
                    "pid": os.getpid(),
                    "node": "127.0.0.1",
                    "extra": dict(extra_data or {}),
                }
            )


# Classic names.
nodes = list_nodes
tasks = list_tasks
actors = list_actors
objects = list_objects
