"""Load-based spillback: which queued tasks move to a node with free resources.

The native scheduler queues a task whose demand fits the node's totals but not what is
free now; it runs when resources come back. That is the right choice for work that
finishes (it keeps data local), but an actor holds its resources for its lifetime, so a
second actor on a full one-CPU node would wait forever while another node sits idle.
The agent therefore asks, several times a second, for the oldest ready tasks of each
shape (``scheduler_snapshot()["ready_tasks"]``) and moves those that do not fit the
local free resources to a peer whose free resources (last heartbeat, less what was sent
to it since) fit them. Work stays local whenever it can start here.

This module is the decision alone, a pure function, so it is tested without processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

EPSILON = 1e-9


@dataclass
class PeerLoad:
    """What a peer can take now: its free resources as last heard, less what this node
    sent it since."""

    address: str
    available: dict[str, float] = field(default_factory=dict)


def fits(demand: dict[str, float], free: dict[str, float]) -> bool:
    """Whether every positive amount of ``demand`` is within ``free``."""
    return all(free.get(k, 0.0) + EPSILON >= v for k, v in demand.items() if v > 0)


def plan_moves(
    ready: Iterable[tuple[bytes, dict[str, float], bool]],
    local_available: dict[str, float],
    peers: list[PeerLoad],
    stay: set[bytes] | frozenset[bytes] = frozenset(),
) -> list[tuple[bytes, str]]:
    """Choose ready tasks to move to peers with free resources.

    Args:
        ready: ``(task_id, demand, actor_creation)`` of tasks queued here, oldest first
            per shape (the snapshot's ``ready_tasks``).
        local_available: this node's free resources now.
        peers: alive peers and their free resources; amounts are taken from them as
            tasks are assigned (the caller's objects are updated).
        stay: tasks that must not move (they were forwarded here already: moving them
            again could bounce them between nodes).

    Returns:
        ``(task_id, address)`` pairs: actor creations first (they would hold resources
        for their lifetime), then tasks in the given order. A task that fits the local
        free resources stays (it starts here as soon as a worker is free), as does a
        task with an empty demand.
    """
    free = dict(local_available)
    candidates = sorted(ready, key=lambda t: not t[2])  # stable: creations first
    moves = []
    for task_id, demand, _creation in candidates:
        if task_id in stay or not any(v > 0 for v in demand.values()):
            continue
        if fits(demand, free):
            for k, v in demand.items():  # it takes these here
                free[k] = free.get(k, 0.0) - v
            continue
        target = next((p for p in peers if fits(demand, p.available)), None)
        if target is None:
            continue
        for k, v in demand.items():
            target.available[k] = target.available.get(k, 0.0) - v
        moves.append((task_id, target.address))
    return moves
