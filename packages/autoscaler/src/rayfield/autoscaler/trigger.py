"""When the monitor steps before its period ends: a pure object fed with the cluster's
node records.

The monitor steps every ``--interval-s`` and, between steps, reads the GCS's node
records (one ``GetNodes`` call, ``StateClient.node_records()``) every ``poll_s``. A step
runs at once when those records differ from the ones the last step saw in what a
decision depends on: the alive nodes, or the pending demand (each node's shapes, counts
and infeasible flags, as its last heartbeat reported them). Queued work thus reaches a
decision within one poll of reaching the GCS, not up to one period later, while a quiet
cluster costs one small call per poll. ``min_gap_s`` bounds how often changes trigger
steps (demand that changes at every heartbeat, e.g. a queue draining, steps at most
once per gap).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["DemandWatch", "signature"]

Signature = tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]


def signature(rows: Iterable[Mapping[str, Any]]) -> Signature:
    """What a decision depends on in node records (``node_records()`` rows): the alive
    node ids and every alive node's demand entries (``shape``, ``count``,
    ``infeasible``), in a canonical order."""
    alive = sorted(str(r["node_id"]) for r in rows if r.get("alive"))
    demand = sorted(
        (
            str(r["node_id"]),
            tuple(sorted((str(k), float(v)) for k, v in d["shape"].items())),
            int(d["count"]),
            bool(d.get("infeasible", False)),
        )
        for r in rows
        if r.get("alive")
        for d in r.get("demand", ())
    )
    return tuple(alive), tuple(demand)


class DemandWatch:
    """Says whether polled node records call for a step now.

    Call order: :meth:`stepped` with the rows each step read (the monitor wraps its load
    function), :meth:`due` with each poll's rows and the time of the poll.

    Args:
        min_gap_s: seconds (monotonic) a triggered step waits at least after the last
            step; 0: none.
    """

    def __init__(self, min_gap_s: float = 0.2) -> None:
        self.min_gap_s = min_gap_s
        self._seen: Signature | None = None
        self._stepped_at: float | None = None

    def stepped(self, rows: Iterable[Mapping[str, Any]], now: float) -> None:
        """A step ran at ``now`` (seconds, monotonic) and read ``rows``."""
        self._seen = signature(rows)
        self._stepped_at = now

    def due(self, rows: Iterable[Mapping[str, Any]], now: float) -> bool:
        """True when ``rows`` differ from the last step's in alive nodes or demand and
        ``min_gap_s`` has passed since that step (always True before the first step)."""
        if self._seen is None or self._stepped_at is None:
            return True
        if now - self._stepped_at < self.min_gap_s:
            return False
        return signature(rows) != self._seen
