"""Helpers shared by the scheduler state-machine tests (``test_scheduler*.py``).

They read ``SchedulerState.decisions()`` (tuples whose first item is the kind) and set up
a scheduler with workers or an actor, without processes or sockets.
"""

from __future__ import annotations

from typing import Any

from store_test_ids import tid

from rayfield.store._native import SchedulerState


def of_kind(decisions: list[tuple[Any, ...]], kind: str) -> list[tuple[Any, ...]]:
    """The decisions whose kind (first item) is `kind`, in order."""
    return [d for d in decisions if d[0] == kind]


def dispatched(decisions: list[tuple[Any, ...]]) -> list[tuple[int, bytes]]:
    """(worker, task_id) of each dispatch, in order."""
    return [(d[1], d[2]) for d in of_kind(decisions, "dispatch")]


def dispatched_ids(decisions: list[tuple[Any, ...]]) -> list[bytes]:
    """The task id of each dispatch, in order."""
    return [task for _, task in dispatched(decisions)]


def dispatch_order_one_at_a_time(s: SchedulerState, worker: int, count: int) -> list[bytes]:
    """The ids of the tasks dispatched while the last one dispatched finishes on `worker`,
    `count - 1` times (the first ones are dispatched by what the test submitted)."""
    order = dispatched_ids(s.decisions())
    for _ in range(count - 1):
        s.task_finished(worker, order[-1])
        order += dispatched_ids(s.decisions())
    return order


def with_workers(total: dict[str, float], n: int) -> SchedulerState:
    """A scheduler with resources `total` and idle workers 1..n."""
    s = SchedulerState(total)
    for w in range(1, n + 1):
        s.add_worker(w)
    return s


def create_actor(
    s: SchedulerState, actor: bytes, worker: int, max_concurrency: int = 1, **resources: float
) -> None:
    """Creates `actor` on the idle `worker` and finishes its creation task.

    The creation task asks for `resources`; the actor runs up to `max_concurrency` calls at once.
    """
    creation = tid(1000 + worker, b"k")
    s.submit(
        creation, resources, actor_id=actor, actor_creation=True, max_concurrency=max_concurrency
    )
    assert dispatched(s.decisions()) == [(worker, creation)]
    assert s.snapshot()["workers"][worker] == "actor"
    s.task_finished(worker, creation)


def actor_call(
    s: SchedulerState, n: int, actor: bytes, caller: bytes, seq: int, **kw: Any
) -> bytes:
    """Submits call `tid(n)` to `actor` from `caller` with sequence number `seq`; returns its id."""
    s.submit(tid(n), actor_id=actor, caller_id=caller, sequence_no=seq, **kw)
    return tid(n)
