"""The state of a cluster: nodes, actors, tasks, objects, workers and logs.

Each function asks the cluster's GCS and, in parallel, every alive node. Records are
dicts of JSON-friendly values (ids as hex strings, sizes in bytes, times in Unix
seconds). The cluster is ``address`` (the GCS as HOST:PORT) when given, else the one
this driver joined with ``rayfield.init(address=...)`` (in a task: its node's), else the
node this driver's own ``rayfield.init()`` started (the embedded runtime: one node, its
actors and tasks known from their events; no key-value store), else the head running on
this machine (started with ``rayfield start --head``). ``rayfield.state`` (the classic
``rayfield.nodes()``, ``rayfield.timeline()``, ...) is built on these functions.

Example:
    >>> from rayfield.util import state
    >>> [n["address"] for n in state.list_nodes() if n["alive"]]
    ['127.0.0.1:40123', '127.0.0.1:40157']

Every function raises ``StateError`` when no cluster is found (the message says how to
start or name one) and ``GcsError`` subclasses (``GcsUnavailableError``,
``GcsAuthError``) when the GCS cannot be reached or refuses the token.

``StateClient`` is the same queries on one connection (what the CLI and the dashboard
use): ``nodes()``, ``node_records()`` (the GCS's node records alone, without asking the
nodes: what an autoscaler polls), ``actors()``, ``jobs()``, ``tasks()``, ``objects()``,
``workers()``, ``task_events()``, ``timeline()``, ``logs()``, ``find_log()``, ``read_log()``,
``kill_actor()``, ``resource_demand()``, ``kv_get()``, ``kv_put()``, ``kv_del()``,
``kv_keys()``. A node that fails a call raises
``NodeCallError`` (rayfield's own: ``status``, ``details``, ``address``; no gRPC type
leaves this module); ``call_status(exc)`` gives the status name and details of either.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from rayfield._private.context import current, gcs_address, sessions_root
from rayfield._private.driver.state_client import StateClient, StateError
from rayfield._private.protocol.errors import (
    GcsAuthError,
    GcsError,
    GcsUnavailableError,
    NodeCallError,
)

__all__ = [
    "GcsAuthError",
    "GcsError",
    "GcsUnavailableError",
    "NodeCallError",
    "StateClient",
    "StateError",
    "call_status",
    "get_log",
    "list_actors",
    "list_jobs",
    "list_logs",
    "list_nodes",
    "list_objects",
    "list_task_events",
    "list_tasks",
    "list_workers",
    "resource_demand",
    "timeline",
]

if TYPE_CHECKING:
    from rayfield._private.node_manager.node import Node

T = TypeVar("T")


def call_status(exc: BaseException) -> tuple[str, str]:
    """``(status name, details)`` of a failed state call: a :class:`NodeCallError` or a
    :class:`GcsError` (its ``status``); ``("UNKNOWN", str(exc))`` for anything else."""
    if isinstance(exc, NodeCallError):
        return exc.status, exc.details
    if isinstance(exc, GcsError):
        return exc.status, str(exc)
    return "UNKNOWN", str(exc)


def _client(address: str | None) -> StateClient:
    """The state client of ``address``, else of this driver's cluster, else of the node
    this driver's ``init()`` started, else of the head running on this machine."""
    address = address or gcs_address()
    if address is None:
        ctx = current()
        if ctx is not None and ctx.node is not None:
            return StateClient.embedded(cast("Node", ctx.node))
    return StateClient(address, temp_dir=sessions_root())


def _with_client(address: str | None, fn: Callable[[StateClient], T]) -> T:
    with _client(address) as client:
        return fn(client)


def list_nodes(address: str | None = None) -> list[dict[str, Any]]:
    """Every node, alive or dead: ``node_id``, ``address``, ``alive``, resources,
    ``last_heartbeat_s`` (Unix seconds), ``idle_duration_s``, and for alive nodes
    ``cpu_percent``, ``memory_used``/``memory_total``, ``store_used``/``store_capacity``
    (bytes), ``num_workers`` and task counts.

    ``idle_duration_s`` is what the node itself reported with its last heartbeat: the
    seconds it had been idle then (no running task or actor, no worker blocked in a
    task, every resource free, nothing queued, waiting or infeasible), counted from the
    first heartbeat that found it idle; 0.0 while it is busy. A node still idle now has
    been idle for about ``idle_duration_s + (time.time() - last_heartbeat_s)``."""
    return _with_client(address, lambda c: c.nodes())


def list_actors(address: str | None = None) -> list[dict[str, Any]]:
    """Every actor: ``actor_id``, ``class_name``, ``name``, ``state`` (ALIVE, DEAD,
    RESTARTING, PENDING_CREATION), ``node``, ``pid``."""
    return _with_client(address, lambda c: c.actors())


def list_jobs(address: str | None = None) -> list[dict[str, Any]]:
    """Every job (a driver connected with ``init(address=...)``), newest first:
    ``job_id``, ``state`` (RUNNING, FINISHED, FAILED), ``driver_pid``, ``node``,
    ``entrypoint`` (the driver's command line), ``start_s``, ``end_s``."""
    return _with_client(address, lambda c: c.jobs())


def list_tasks(address: str | None = None, limit: int = 0) -> list[dict[str, Any]]:
    """Running tasks (state RUNNING) and finished ones (FINISHED, FAILED) with ``name``,
    ``node``, ``pid`` and ``duration_s``; ``limit`` keeps the most recent finished ones."""
    return _with_client(address, lambda c: c.tasks(limit))


def list_task_events(address: str | None = None, limit: int = 0) -> list[dict[str, Any]]:
    """The task events the cluster's GCS keeps (the most recent ``limit``; 0: all), oldest
    first: one dict an event with ``kind``, ``name``, ``task``, ``node``, ``pid`` and the
    phase times ``submit``, ``args``, ``run``, ``end`` (Unix seconds)."""
    return _with_client(address, lambda c: c.task_events(limit))


def resource_demand(address: str | None = None) -> list[dict[str, Any]]:
    """Work the alive nodes cannot start yet, per node and resource shape, as each node
    reported with its last heartbeat (at most 0.5 s old): what an autoscaler sizes for.

    Returns:
        One dict a (node, shape): ``node_id`` (hex), ``address``, ``shape`` (resource
        name -> amount one task needs), ``count`` (tasks of that shape waiting) and
        ``infeasible`` (True: no node of the cluster has the resources).
    """
    return _with_client(address, lambda c: c.resource_demand())


def list_objects(address: str | None = None) -> list[dict[str, Any]]:
    """Objects in every node's store, largest first: ``object_id``, ``size_bytes``,
    ``node``, ``owner_pid``, ``reason`` (why it is held), ``spilled``."""
    return _with_client(address, lambda c: c.objects())


def list_workers(address: str | None = None) -> list[dict[str, Any]]:
    """Worker processes: ``node``, ``pid``, ``state``, ``cpu_percent``, ``rss_bytes``."""
    return _with_client(address, lambda c: c.workers())


def list_logs(address: str | None = None, node: str | None = None) -> list[dict[str, Any]]:
    """Log files of every node (or of ``node``: an id prefix or address)."""
    return _with_client(address, lambda c: c.logs(node))


def get_log(
    address: str | None = None,
    *,
    pid: int | None = None,
    actor_id: str | None = None,
    task_id: str | None = None,
    node: str | None = None,
    filename: str | None = None,
    tail: int = 64 << 10,
) -> str:
    """The last ``tail`` bytes of a log: a worker's (by ``pid``, ``actor_id`` or
    ``task_id``) or a named file on ``node``.

    Raises:
        StateError: when no log matches.
    """

    def read(c: StateClient) -> str:
        if filename is not None:
            if node is None:
                raise StateError("get_log(filename=...) needs node=")
            where, name = node, filename
        else:
            where, name = c.find_log(pid, actor_id, task_id)
        reply = c.read_log(where, name, offset=-tail, max_bytes=tail)
        if not reply["found"]:
            raise StateError(f"{name} does not exist on {where} (yet): see list_logs()")
        return bytes(reply["data"]).decode(errors="replace")

    return _with_client(address, read)


def timeline(address: str | None = None, filename: str | None = None) -> list[dict[str, Any]]:
    """Every task and actor call of the cluster, by phase and node, in Chrome tracing
    format (also written to ``filename`` when given)."""
    trace = _with_client(address, lambda c: c.timeline())
    if filename is not None:
        Path(filename).write_text(json.dumps(trace))
    return trace
