"""Unit tests of ``SchedulerState`` for actors (creation, per-caller order,
concurrency, restarts, forwarded calls) and ``take_task``.

Driven as a state machine as in ``test_scheduler.py``: no processes, sockets or threads.
"""

from __future__ import annotations

from scheduler_helpers import (
    actor_call,
    create_actor,
    dispatch_order_one_at_a_time,
    dispatched,
    dispatched_ids,
    of_kind,
    with_workers,
)
from store_test_ids import aid, cid, oid, tid

from rayfield.store._native import SchedulerState

# ---- actors --------------------------------------------------------------------------


def test_actor_tasks_wait_for_creation_to_finish() -> None:
    s = with_workers({"CPU": 2}, 2)
    creation = tid(100)
    s.submit(creation, {"CPU": 1}, actor_id=aid(1), actor_creation=True)
    actor_call(s, 1, aid(1), cid(1), 0)
    assert dispatched(s.decisions()) == [(1, creation)]
    assert s.snapshot()["actor_tasks_queued"] == 1
    s.task_finished(1, creation)
    assert dispatched(s.decisions()) == [(1, tid(1))]
    assert s.available() == {"CPU": 1}  # the actor keeps its creation resources
    s.task_finished(1, tid(1))
    assert s.available() == {"CPU": 1}
    assert s.snapshot()["workers"] == {1: "actor", 2: "idle"}


def test_plain_tasks_never_go_to_actor_workers() -> None:
    s = with_workers({"CPU": 4}, 1)
    create_actor(s, aid(1), 1)
    s.submit(tid(1), {"CPU": 1})
    decisions = s.decisions()
    assert dispatched(decisions) == []
    assert of_kind(decisions, "need_worker") == [("need_worker", {"CPU": 1.0}, 1)]


def test_actor_calls_run_in_caller_order_despite_arrival_order() -> None:
    s = with_workers({"CPU": 1}, 1)
    create_actor(s, aid(1), 1)
    actor_call(s, 2, aid(1), cid(1), 2)
    actor_call(s, 1, aid(1), cid(1), 1)
    assert s.decisions() == []  # seq 0 not here yet
    actor_call(s, 0, aid(1), cid(1), 0)
    assert dispatch_order_one_at_a_time(s, 1, 3) == [tid(0), tid(1), tid(2)]


def test_actor_call_with_missing_dependency_holds_later_calls_of_its_caller() -> None:
    s = with_workers({"CPU": 1}, 1)
    create_actor(s, aid(1), 1, max_concurrency=4)
    actor_call(s, 0, aid(1), cid(1), 0, dependencies=[oid(1)], missing=[oid(1)])
    actor_call(s, 1, aid(1), cid(1), 1)
    actor_call(s, 2, aid(1), cid(2), 0)  # another caller is not held
    decisions = s.decisions()
    assert of_kind(decisions, "missing_dependencies") == [
        ("missing_dependencies", tid(0), [oid(1)])
    ]
    assert dispatched_ids(decisions) == [tid(2)]
    assert s.snapshot()["waiting_for_dependencies"] == 1
    s.object_available(oid(1))
    assert dispatched_ids(s.decisions()) == [tid(0), tid(1)]


def test_actor_max_concurrency() -> None:
    s = with_workers({"CPU": 1}, 1)
    create_actor(s, aid(1), 1, max_concurrency=2)
    for i in range(3):
        actor_call(s, i, aid(1), cid(1), i)
    assert dispatched_ids(s.decisions()) == [tid(0), tid(1)]
    assert s.snapshot()["running"] == 2
    s.task_finished(1, tid(1))
    assert dispatched_ids(s.decisions()) == [tid(2)]


def test_actor_calls_of_different_callers_interleave_fifo() -> None:
    s = with_workers({"CPU": 1}, 1)
    create_actor(s, aid(1), 1)
    actor_call(s, 0, aid(1), cid(2), 0)
    actor_call(s, 1, aid(1), cid(1), 0)
    actor_call(s, 2, aid(1), cid(2), 1)
    assert dispatch_order_one_at_a_time(s, 1, 3) == [tid(0), tid(1), tid(2)]


def test_actor_holds_gpu_for_its_lifetime_until_worker_lost() -> None:
    s = with_workers({"CPU": 2, "GPU": 1}, 2)
    creation = tid(100)
    s.submit(creation, {"GPU": 1}, actor_id=aid(1), actor_creation=True)
    assert of_kind(s.decisions(), "dispatch") == [("dispatch", 1, creation, [("GPU", 0, 1.0)])]
    s.task_finished(1, creation)
    s.submit(tid(1), {"GPU": 1})  # must wait: the actor holds the GPU while idle
    assert dispatched(s.decisions()) == []
    actor_call(s, 2, aid(1), cid(1), 0)
    actor_call(s, 3, aid(1), cid(1), 1)
    assert dispatched_ids(s.decisions()) == [tid(2)]
    s.remove_worker(1)
    decisions = s.decisions()
    assert decisions[0] == ("worker_lost", 1, [tid(2)], aid(1))
    assert dispatched(decisions) == [(2, tid(1))]
    assert s.snapshot()["actor_tasks_queued"] == 1  # tid(3) stays queued for a restart


def test_restarted_actor_runs_queued_calls() -> None:
    s = with_workers({"CPU": 1}, 1)
    create_actor(s, aid(1), 1)
    actor_call(s, 0, aid(1), cid(1), 0)
    actor_call(s, 1, aid(1), cid(1), 1)
    assert dispatched_ids(s.decisions()) == [tid(0)]
    s.remove_worker(1)
    assert of_kind(s.decisions(), "worker_lost") == [("worker_lost", 1, [tid(0)], aid(1))]
    s.add_worker(2)
    create_actor(s, aid(1), 2)
    assert dispatched(s.decisions()) == [(2, tid(1))]


def test_actor_creation_needs_an_idle_worker() -> None:
    s = SchedulerState({"CPU": 2})
    s.submit(tid(100), {"CPU": 1}, actor_id=aid(1), actor_creation=True)
    assert of_kind(s.decisions(), "need_worker") == [("need_worker", {"CPU": 1.0}, 1)]
    s.add_worker(5)
    assert dispatched(s.decisions()) == [(5, tid(100))]


# ---- take_task -----------------------------------------------------------------------


def test_take_task_returns_spec_of_queued_task() -> None:
    s = SchedulerState({"CPU": 1})
    s.submit(
        tid(1),
        {"CPU": 0.5},
        dependencies=[oid(1)],
        actor_id=aid(1),
        caller_id=cid(1),
        sequence_no=3,
        payload=b"spec-bytes",
    )
    assert s.take_task(tid(1)) == {
        "task_id": tid(1),
        "resources": {"CPU": 0.5},
        "dependencies": [oid(1)],
        "actor_id": aid(1),
        "actor_creation": False,
        "max_concurrency": 1,
        "caller_id": cid(1),
        "sequence_no": 3,
        "payload": b"spec-bytes",
        "return_ids": [],
        "max_retries": 0,
        "scheduling": "",
        "runtime_env": "",
    }
    assert s.take_task(tid(1)) is None
    assert s.snapshot()["actor_tasks_queued"] == 0


def test_take_task_of_plain_task_has_no_actor() -> None:
    s = SchedulerState({"CPU": 1})
    s.submit(tid(1))
    spec = s.take_task(tid(1))
    assert spec is not None
    assert spec["actor_id"] is None and spec["caller_id"] is None and spec["resources"] == {}
    assert s.snapshot()["ready_by_shape"] == []


def test_take_task_ignores_running_and_removes_waiting_and_infeasible() -> None:
    s = with_workers({"CPU": 1}, 1)
    s.submit(tid(1), {"CPU": 1})
    s.submit(tid(2), {"CPU": 1}, missing=[oid(1)])
    s.submit(tid(3), {"CPU": 9})
    s.decisions()
    assert s.take_task(tid(1)) is None  # running
    assert s.take_task(tid(2))["task_id"] == tid(2)
    assert s.take_task(tid(3))["task_id"] == tid(3)
    snap = s.snapshot()
    assert snap["waiting_for_dependencies"] == 0 and snap["infeasible"] == []
    s.object_available(oid(1))
    s.task_finished(1, tid(1))
    assert s.decisions() == []  # the taken task does not come back


def test_taken_actor_call_does_not_hold_later_calls() -> None:
    s = with_workers({"CPU": 1}, 1)
    create_actor(s, aid(1), 1)
    actor_call(s, 0, aid(1), cid(1), 0, missing=[oid(1)])
    actor_call(s, 1, aid(1), cid(1), 1)
    actor_call(s, 2, aid(1), cid(1), 2, missing=[oid(2)])
    actor_call(s, 3, aid(1), cid(1), 3)
    s.decisions()
    assert s.take_task(tid(0)) is not None
    assert dispatched_ids(s.decisions()) == [tid(1)]
    s.task_finished(1, tid(1))
    assert s.decisions() == []  # seq 2 waits for its dependency
    assert s.take_task(tid(2)) is not None
    assert dispatched_ids(s.decisions()) == [tid(3)]
    s.task_finished(1, tid(3))
    actor_call(s, 5, aid(1), cid(1), 5)  # out of order: held until seq 4
    assert s.take_task(tid(5)) is not None
    actor_call(s, 6, aid(1), cid(1), 6)
    assert s.decisions() == []
    actor_call(s, 4, aid(1), cid(1), 4)
    assert dispatched_ids(s.decisions()) == [tid(4)]
    s.task_finished(1, tid(4))
    assert dispatched_ids(s.decisions()) == [tid(6)]  # the taken seq 5 is passed over


def test_calls_forwarded_after_an_actor_moved_resume_their_callers_sequence() -> None:
    s = with_workers({"CPU": 1}, 1)
    create_actor(s, aid(1), 1)
    # The actor ran calls 0-4 of this caller on another node: here they start at 5.
    actor_call(s, 5, aid(1), cid(1), 5, resume_sequence=True)
    order = dispatched_ids(s.decisions())
    actor_call(s, 6, aid(1), cid(1), 6, resume_sequence=True)
    s.task_finished(1, order[-1])
    order += dispatched_ids(s.decisions())
    assert order == [tid(5), tid(6)]
    actor_call(s, 8, aid(1), cid(2), 8)  # another caller, not forwarded: waits for its 0
    s.task_finished(1, order[-1])
    assert dispatched_ids(s.decisions()) == []
