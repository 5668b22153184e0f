"""Unit tests of the local scheduler state machine (``SchedulerState``): resource
accounting, queues, dependencies, workers, infeasible tasks and bad input.

The scheduler is driven directly: events in (submit, object_available, worker
changes), decisions out (``decisions()``). No processes, sockets or threads. The
other topics are in ``test_scheduler_instances.py`` (GPU and CPU instances, blocked
workers) and ``test_scheduler_actors.py`` (actors and ``take_task``).
"""

from __future__ import annotations

import math

import pytest
from scheduler_helpers import (
    dispatch_order_one_at_a_time,
    dispatched,
    dispatched_ids,
    of_kind,
    with_workers,
)
from store_test_ids import aid, cid, oid, tid

from rayfield.store._native import SchedulerState

# ---- resource accounting ------------------------------------------------------------


def test_resources_acquired_at_dispatch_and_released_at_finish() -> None:
    s = with_workers({"CPU": 4, "memory": 100}, 2)
    s.submit(tid(1), {"CPU": 1.5, "memory": 30})
    assert dispatched(s.decisions()) == [(1, tid(1))]
    assert s.available() == {"CPU": 2.5, "memory": 70}
    assert s.total() == {"CPU": 4, "memory": 100}
    s.task_finished(1, tid(1))
    assert s.available() == {"CPU": 4, "memory": 100}
    assert s.snapshot()["workers"] == {1: "idle", 2: "idle"}


def test_fractional_resources_to_one_ten_thousandth() -> None:
    s = with_workers({"CPU": 1}, 5)
    for i in range(3):
        s.submit(tid(i), {"CPU": 0.3333})
    assert len(dispatched(s.decisions())) == 3
    assert s.available()["CPU"] == pytest.approx(0.0001, abs=1e-12)
    s.submit(tid(10), {"CPU": 0.0002})  # does not fit in 0.0001
    assert dispatched(s.decisions()) == []
    s.submit(tid(11), {"CPU": 0.0001})  # fits exactly, and is not blocked by tid(10)
    assert dispatched_ids(s.decisions()) == [tid(11)]
    assert "CPU" not in s.available()  # exactly 0 left: zero entries are omitted
    for i in range(3):
        s.task_finished(i + 1, tid(i))
    assert dispatched_ids(s.decisions()) == [tid(10)]
    assert s.available()["CPU"] == pytest.approx(0.9997, abs=1e-12)  # tid(10), tid(11) run


def test_amounts_round_to_fixed_point() -> None:
    s = SchedulerState({"CPU": 1.23456, "tiny": 0.00004})
    assert s.total() == {"CPU": 1.2346}  # rounded; 0.00004 rounds to 0 and is dropped


# ---- queues --------------------------------------------------------------------------


def test_fifo_within_a_shape() -> None:
    s = with_workers({"CPU": 1}, 1)
    for i in range(4):
        s.submit(tid(i), {"CPU": 1})
    assert dispatch_order_one_at_a_time(s, 1, 4) == [tid(0), tid(1), tid(2), tid(3)]


def test_big_shape_does_not_block_small_one() -> None:
    s = with_workers({"CPU": 2}, 3)
    s.submit(tid(1), {"CPU": 1})
    s.submit(tid(2), {"CPU": 2})  # older than tid(3) but does not fit now
    s.submit(tid(3), {"CPU": 1})
    assert dispatched_ids(s.decisions()) == [tid(1), tid(3)]
    snap = s.snapshot()
    assert snap["ready_by_shape"] == [({"CPU": 2.0}, 1)]
    assert snap["ready_tasks"] == [(tid(2), {"CPU": 2.0}, False)]
    assert snap["running"] == 2
    s.task_finished(1, tid(1))
    assert dispatched_ids(s.decisions()) == []
    s.task_finished(2, tid(3))
    assert dispatched_ids(s.decisions()) == [tid(2)]


def test_snapshot_lists_the_oldest_ready_tasks_of_each_shape() -> None:
    s = SchedulerState({"CPU": 1})  # no worker: everything stays ready
    for i in range(20):
        s.submit(tid(i), {"CPU": 1})
    s.submit(tid(99), {"CPU": 1}, actor_id=tid(98), actor_creation=True)
    ready = s.snapshot()["ready_tasks"]
    assert [t for t, _, _ in ready] == [tid(i) for i in range(16)]  # 16 per shape at most
    assert all(shape == {"CPU": 1.0} and not creation for _, shape, creation in ready)
    s2 = SchedulerState({"CPU": 1})
    s2.submit(tid(99), {"CPU": 1}, actor_id=tid(98), actor_creation=True)
    assert s2.snapshot()["ready_tasks"] == [(tid(99), {"CPU": 1.0}, True)]


def test_oldest_head_wins_among_shapes_that_fit() -> None:
    s = SchedulerState({"CPU": 4})
    s.submit(tid(1), {"CPU": 2})
    s.submit(tid(2), {"CPU": 1})
    s.submit(tid(3), {"CPU": 2})
    s.submit(tid(4), {"CPU": 1})
    s.decisions()
    for w in range(1, 5):
        s.add_worker(w)
    # 1 (2 CPU), then 2 (1 CPU); 3 does not fit in the last CPU, 4 does.
    assert dispatched_ids(s.decisions()) == [tid(1), tid(2), tid(4)]


def test_duplicate_submission_is_ignored() -> None:
    s = with_workers({"CPU": 2}, 2)
    s.submit(tid(1), {"CPU": 1})
    s.submit(tid(1), {"CPU": 1})
    assert dispatched_ids(s.decisions()) == [tid(1)]
    assert s.snapshot()["ready_by_shape"] == []


# ---- dependencies --------------------------------------------------------------------


def test_task_waits_for_missing_dependencies() -> None:
    s = with_workers({"CPU": 1}, 1)
    deps = [oid(1), oid(2), oid(3)]
    s.submit(tid(1), {"CPU": 1}, dependencies=deps, missing=[oid(3), oid(1), oid(3)])
    assert s.decisions() == [("missing_dependencies", tid(1), [oid(3), oid(1)])]
    assert s.snapshot()["waiting_for_dependencies"] == 1
    s.object_available(oid(2))  # was local already: no effect
    s.object_available(oid(1))
    assert s.decisions() == []
    s.object_available(oid(3))
    assert s.decisions() == [("dispatch", 1, tid(1), [("CPU", 0, 1.0)])]
    assert s.snapshot()["waiting_for_dependencies"] == 0


def test_ready_task_behind_waiting_one_is_not_held() -> None:
    s = with_workers({"CPU": 2}, 2)
    s.submit(tid(1), {"CPU": 1}, dependencies=[oid(1)], missing=[oid(1)])
    s.submit(tid(2), {"CPU": 1}, dependencies=[oid(2)])
    assert dispatched_ids(s.decisions()) == [tid(2)]
    s.object_available(oid(1))
    assert dispatched_ids(s.decisions()) == [tid(1)]


def test_one_object_wakes_every_waiter() -> None:
    s = with_workers({"CPU": 3}, 3)
    for i in range(3):
        s.submit(tid(i), {"CPU": 1}, missing=[oid(7)])
    assert len(of_kind(s.decisions(), "missing_dependencies")) == 3
    s.object_available(oid(7))
    assert dispatched_ids(s.decisions()) == [tid(0), tid(1), tid(2)]


# ---- workers -------------------------------------------------------------------------


def test_need_worker_carries_count_of_tasks_that_fit() -> None:
    s = SchedulerState({"CPU": 4})
    for i in range(10):
        s.submit(tid(i), {"CPU": 1})
    decisions = s.decisions()
    assert of_kind(decisions, "need_worker") == [("need_worker", {"CPU": 1.0}, 4)]
    assert s.decisions() == []  # nothing changed: not asked again
    s.add_worker(1)
    decisions = s.decisions()
    assert dispatched(decisions) == [(1, tid(0))]
    assert of_kind(decisions, "need_worker") == [("need_worker", {"CPU": 1.0}, 3)]


def test_need_worker_shape_is_the_oldest_fitting_task() -> None:
    s = SchedulerState({"CPU": 2, "GPU": 1})
    s.submit(tid(1), {"CPU": 4})  # infeasible, not counted
    s.submit(tid(2), {"GPU": 1})
    s.submit(tid(3), {"CPU": 1})
    decisions = s.decisions()
    assert of_kind(decisions, "need_worker") == [("need_worker", {"GPU": 1.0}, 2)]
    assert len(of_kind(decisions, "task_infeasible")) == 1


def test_no_need_worker_when_nothing_fits() -> None:
    s = with_workers({"CPU": 1}, 1)
    s.submit(tid(1), {"CPU": 1})
    s.submit(tid(2), {"CPU": 1})
    decisions = s.decisions()
    assert dispatched_ids(decisions) == [tid(1)]
    assert of_kind(decisions, "need_worker") == []


def test_worker_loss_reports_running_tasks_and_releases() -> None:
    s = with_workers({"CPU": 2}, 2)
    s.submit(tid(1), {"CPU": 2})
    s.submit(tid(2), {"CPU": 1})
    assert dispatched(s.decisions()) == [(1, tid(1))]
    s.remove_worker(1)
    decisions = s.decisions()
    assert decisions[0] == ("worker_lost", 1, [tid(1)], None)
    assert dispatched(decisions) == [(2, tid(2))]
    assert s.available() == {"CPU": 1}
    assert s.snapshot()["workers"] == {2: "busy"}
    s.remove_worker(99)  # unknown: ignored
    assert s.decisions() == []


# ---- infeasible ----------------------------------------------------------------------


def test_infeasible_task_is_held_with_reason() -> None:
    s = with_workers({"CPU": 2, "GPU": 1}, 2)
    s.submit(tid(1), {"CPU": 4, "GPU": 0.5})
    s.submit(tid(2), {"TPU": 1})
    decisions = s.decisions()
    assert [d[:3] for d in decisions] == [
        ("task_infeasible", tid(1), {"CPU": 4.0, "GPU": 0.5}),
        ("task_infeasible", tid(2), {"TPU": 1.0}),
    ]
    reason1, reason2 = decisions[0][3], decisions[1][3]
    assert "{CPU: 4, GPU: 0.5}" in reason1 and "{CPU: 2, GPU: 1}" in reason1
    assert "CPU 4 > 2" in reason1
    assert "TPU" in reason2 and "not defined" in reason2
    snap = s.snapshot()
    assert [(t, d) for t, d, _ in snap["infeasible"]] == [
        (tid(1), {"CPU": 4.0, "GPU": 0.5}),
        (tid(2), {"TPU": 1.0}),
    ]
    assert snap["ready_by_shape"] == []


def test_infeasible_task_reexamined_when_totals_change() -> None:
    s = with_workers({"CPU": 2}, 2)
    s.submit(tid(1), {"CPU": 4}, missing=[oid(1)])
    s.submit(tid(2), {"TPU": 1})
    assert [d[0] for d in s.decisions()] == ["task_infeasible", "task_infeasible"]
    s.set_total({"CPU": 4})
    # tid(1) becomes feasible and only now asks for its dependency.
    assert s.decisions() == [("missing_dependencies", tid(1), [oid(1)])]
    assert [t for t, _, _ in s.snapshot()["infeasible"]] == [tid(2)]
    assert "{CPU: 4}" in s.snapshot()["infeasible"][0][2]  # reason names the new totals
    s.object_available(oid(1))
    assert dispatched_ids(s.decisions()) == [tid(1)]
    assert s.available() == {}


def test_shrinking_totals_make_queued_tasks_infeasible() -> None:
    s = with_workers({"CPU": 4}, 2)
    s.submit(tid(1), {"CPU": 4})
    s.submit(tid(2), {"CPU": 3})
    assert dispatched_ids(s.decisions()) == [tid(1)]
    s.set_total({"CPU": 2})
    assert [d[:2] for d in s.decisions()] == [("task_infeasible", tid(2))]
    assert s.available() == {"CPU": -2}  # the running task keeps what it holds
    s.task_finished(1, tid(1))
    assert s.available() == {"CPU": 2}
    s.set_total({"CPU": 3})
    assert dispatched_ids(s.decisions()) == [tid(2)]


# ---- bad input -----------------------------------------------------------------------


def test_bad_ids_are_rejected() -> None:
    s = SchedulerState({"CPU": 1})
    with pytest.raises(ValueError, match="20 bytes"):
        s.submit(b"short")
    with pytest.raises(ValueError, match="20 bytes"):
        s.object_available(b"x" * 21)
    with pytest.raises(ValueError, match="20 bytes"):
        s.submit(tid(1), dependencies=[b"x"])
    with pytest.raises(ValueError, match="actor_id"):
        s.submit(tid(1), actor_id=b"x")
    with pytest.raises(TypeError):
        s.take_task("not bytes")
    assert s.snapshot()["ready_by_shape"] == []  # nothing was submitted


@pytest.mark.parametrize("amount", [-1, -0.5, math.nan, math.inf])
def test_bad_resource_amounts_are_rejected(amount: float) -> None:
    with pytest.raises(ValueError, match="CPU"):
        SchedulerState({"CPU": amount})
    s = SchedulerState({"CPU": 1})
    with pytest.raises(ValueError, match="CPU"):
        s.submit(tid(1), {"CPU": amount})
    with pytest.raises(ValueError, match="CPU"):
        s.set_total({"CPU": amount})
    assert s.total() == {"CPU": 1}


def test_bad_arguments_are_rejected() -> None:
    s = SchedulerState({"CPU": 1})
    with pytest.raises(TypeError):
        s.submit(tid(1), {1: 1.0})
    with pytest.raises(TypeError):
        s.submit(tid(1), {"CPU": "one"})
    with pytest.raises(ValueError, match="max_concurrency"):
        s.submit(tid(1), actor_id=aid(1), actor_creation=True, max_concurrency=0)
    with pytest.raises(ValueError, match="actor_id"):
        s.submit(tid(1), actor_creation=True)
    with pytest.raises(ValueError, match="sequence_no"):
        s.submit(tid(1), actor_id=aid(1), caller_id=cid(1), sequence_no=-1)
    with pytest.raises(ValueError, match="worker"):
        s.add_worker(-1)
    with pytest.raises(TypeError):
        s.add_worker("1")
    assert s.decisions() == [] and s.snapshot()["workers"] == {}
