"""How long a node has been idle, as its heartbeat reports it (``idle_duration_s``).

A node is idle when nothing runs or waits on it: no running task, no actor (a worker
holding an actor, busy or not), no worker blocked in a task, every resource free
(nothing leased), no task queued, waiting for its arguments or infeasible, and no task
waiting to spill to another node. :class:`IdleClock` turns the node's observations (one
per heartbeat) into the seconds it has been idle: counted from the first observation
that found it idle, 0.0 while it is busy. An autoscaler reads the figure from the GCS's
node record (``rayfield.util.state``) and removes nodes idle past its timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["IdleClock", "is_idle"]

_EPS = 1e-9
_BUSY_WORKER_STATES = frozenset({"busy", "blocked", "actor"})


def is_idle(snapshot: Mapping[str, Any], spilling: int = 0) -> bool:
    """Whether a node is idle.

    Args:
        snapshot: the native scheduler's snapshot (``scheduler_snapshot()``): ``total``,
            ``available``, ``running``, ``workers`` (pid -> state), ``ready_by_shape``,
            ``waiting_for_dependencies``, ``infeasible``, ``actor_tasks_queued``.
        spilling: tasks this node waits to hand to another node.
    """
    available = snapshot.get("available", {})
    if any(available.get(k, 0.0) + _EPS < v for k, v in snapshot.get("total", {}).items()):
        return False
    if any(state in _BUSY_WORKER_STATES for state in snapshot.get("workers", {}).values()):
        return False
    return not (
        snapshot.get("running", 0)
        or snapshot.get("ready_by_shape")
        or snapshot.get("waiting_for_dependencies", 0)
        or snapshot.get("infeasible")
        or snapshot.get("actor_tasks_queued", 0)
        or spilling
    )


class IdleClock:
    """Seconds a node has been idle, from observations.

    Args:
        clock: seconds, monotonic (default ``time.monotonic``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._since: float | None = None

    def observe(self, idle: bool) -> float:
        """Record whether the node is idle now; the seconds it has been idle since the
        first observation that found it so (0.0 when it is busy, or idle since this
        one)."""
        now = self.clock()
        if not idle:
            self._since = None
            return 0.0
        if self._since is None:
            self._since = now
        return now - self._since
