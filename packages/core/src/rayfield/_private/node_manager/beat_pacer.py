"""When a node's heartbeat goes: every period, and early when its demand grew.

The heartbeat carries the node's pending demand: ready work queued for busy resources
(by resource shape) and the tasks no node fits yet (infeasible). An autoscaler reads that
demand from the GCS's node record and launches nodes for it, so a node that kept new
demand to itself until its next periodic beat would delay every scale-up by up to a
period (0.5 s by default). :class:`BeatPacer` decides when the next beat goes, from the
demand the node observes and the beats it sent (pure: the caller gives the time, in
monotonic seconds):

* a beat is due ``period_s`` after the last one;
* a demand that grew over what the last beat carried (a shape the beat did not carry,
  or more tasks of a shape than it said) brings the next beat forward to ``debounce_s``
  after the first observation of the growth, so a burst of submissions goes out as one
  beat, and never sooner than ``min_gap_s`` after the last beat, so a queue that grows
  without pause costs at most one beat every ``min_gap_s``;
* a demand that shrank waits for the periodic beat (an autoscaler launches for growth;
  the demand that went away is reported within the period).

``membership.py`` carries it out: the node's parts that see the demand change (the
spillback of an infeasible task, the placement loop seeing the ready queue change) wake
the heartbeat thread, which measures the demand and asks the pacer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["BeatPacer", "DemandKey", "demand_key", "grew"]

DemandKey = tuple[bool, frozenset[tuple[str, float]]]
"""One kind of demand: ``(infeasible, shape)``, the shape as ``(resource, amount)`` pairs."""

DEBOUNCE_S = 0.02  # growth seen within this long of the first goes out in the same beat
MIN_GAP_S = 0.1  # an early beat is never sooner than this after the last beat


def demand_key(
    ready_by_shape: Iterable[tuple[Mapping[str, float], int]],
    infeasible: Iterable[Mapping[str, float]],
) -> dict[DemandKey, int]:
    """A node's demand as counts by kind, comparable between observations.

    Args:
        ready_by_shape: ``(shape, count)`` of the work queued here for busy resources
            (the scheduler snapshot's ``ready_by_shape``).
        infeasible: the demand of each task no node fits (one mapping a task).
    """
    counts: dict[DemandKey, int] = {}
    for shape, n in ready_by_shape:
        key = (False, frozenset(dict(shape).items()))
        counts[key] = counts.get(key, 0) + int(n)
    for shape in infeasible:
        key = (True, frozenset(dict(shape).items()))
        counts[key] = counts.get(key, 0) + 1
    return counts


def grew(sent: Mapping[DemandKey, int], now: Mapping[DemandKey, int]) -> bool:
    """Whether demand ``now`` holds something ``sent`` did not say: a new kind, or more
    tasks of a kind."""
    return any(n > sent.get(key, 0) for key, n in now.items())


class BeatPacer:
    """Decides when a node's next heartbeat goes.

    Args:
        period_s: seconds between periodic beats (> 0).
        now: monotonic seconds of the node's start (the first beat is due a period later).
        debounce_s: delay of an early beat after the growth that called for it (>= 0).
        min_gap_s: least seconds between the last beat and an early one (>= 0).

    Raises:
        ValueError: a period that is not positive, or a negative or NaN delay.
    """

    def __init__(
        self,
        period_s: float,
        now: float,
        debounce_s: float = DEBOUNCE_S,
        min_gap_s: float = MIN_GAP_S,
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"heartbeat period {period_s!r} s: give a positive number of seconds")
        for name, value in (("debounce_s", debounce_s), ("min_gap_s", min_gap_s)):
            if not value >= 0:
                raise ValueError(f"{name}={value!r}: give zero or more seconds")
        self.period_s = period_s
        self.debounce_s = debounce_s
        self.min_gap_s = min_gap_s
        self.last_beat = now
        self.sent: dict[DemandKey, int] = {}
        self.early_at = math.inf  # when an early beat is due (inf: none is)

    @property
    def early(self) -> bool:
        """Whether an early beat is due (growth was observed since the last beat)."""
        return self.early_at < math.inf

    def observe(self, demand: Mapping[DemandKey, int], now: float) -> bool:
        """Take the node's demand at ``now``; True when it calls for an early beat that
        was not due yet."""
        if self.early or not grew(self.sent, demand):
            return False
        self.early_at = max(now + self.debounce_s, self.last_beat + self.min_gap_s)
        return True

    def due_at(self) -> float:
        """Monotonic seconds at which the next beat is due."""
        return min(self.last_beat + self.period_s, self.early_at)

    def wait_s(self, now: float) -> float:
        """Seconds from ``now`` until the next beat (0.0 when it is due)."""
        return max(0.0, self.due_at() - now)

    def beaten(self, demand: Mapping[DemandKey, int], now: float) -> None:
        """A beat carrying ``demand`` went at ``now`` (periodic or early)."""
        self.last_beat = now
        self.sent = dict(demand)
        self.early_at = math.inf
