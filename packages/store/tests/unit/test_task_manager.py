"""Unit tests of the node's task and actor manager (``TaskManagerState``).

The manager is driven directly: events in (submit, worker registered, task done, client
gone, cancel, kill), decisions out (``decisions()``): dispatches, error objects, pins to
drop, worker processes to kill or interrupt, and events for the host. No processes,
sockets or threads.
"""

from __future__ import annotations

from typing import Any

import pytest
from store_test_ids import aid, oid, tid

from rayfield.store._native import TaskManagerState
from rayfield.store.errors import ObjectNotFoundError


def job_task(job: bytes, n: int) -> bytes:
    """A task id starting with a 4-byte job prefix."""
    return job + n.to_bytes(16, "big")


def of_kind(decisions: list[Any], kind: str) -> list[Any]:
    return [d for d in decisions if d.kind == kind]


def dispatched(decisions: list[Any]) -> list[tuple[int, bytes]]:
    return [(d.worker, d.task_id) for d in of_kind(decisions, "dispatch_task")]


def errors(decisions: list[Any]) -> dict[bytes, str]:
    """object_id -> tag of each error object to store."""
    return {d.object_id: d.tag for d in of_kind(decisions, "store_error")}


def manager(workers: int = 1, cpus: float = 4) -> TaskManagerState:
    m = TaskManagerState({"CPU": cpus}, "test-node")
    for w in range(1, workers + 1):
        m.worker_registered(w, 1000 + w)
    return m


# ---- plain tasks -------------------------------------------------------------------------


def test_submit_dispatch_finish_releases_pins() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)], pins=[oid(9)], max_retries=2)
    d = m.decisions()
    assert dispatched(d) == [(1, tid(1))]
    [dispatch] = of_kind(d, "dispatch_task")
    assert (dispatch.retries_left, dispatch.attempt) == (2, 0)
    assert dispatch[0] == "dispatch_task" and dispatch[1] == 1  # the positional form still works
    assert m.running_tasks() == [
        {"worker": 1, "task_id": tid(1), "retriable": True, "actor_task": False, "dispatch_seq": 1}
    ]
    m.task_done(1, tid(1))
    d = m.decisions()
    assert [(x.kind, x.object_ids) for x in of_kind(d, "release_pins")] == [
        ("release_pins", [oid(9)])
    ]
    assert errors(d) == {}
    assert m.running_tasks() == []
    assert m.cancel_task(tid(1)) == "done"  # finished: nothing left to cancel


def test_task_waits_for_dependencies_and_asks_for_them() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, dependencies=[oid(1)], missing=[oid(1)])
    d = m.decisions()
    assert dispatched(d) == []
    [missing] = of_kind(d, "missing_dependencies")
    assert (missing.task_id, missing.object_ids) == (tid(1), [oid(1)])
    m.object_available(oid(1))
    assert dispatched(m.decisions()) == [(1, tid(1))]


def test_worker_death_retries_then_fails_with_worker_died() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)], max_retries=1)
    assert dispatched(m.decisions()) == [(1, tid(1))]
    m.client_gone(1, worker=True, pid=1001)
    d = m.decisions()
    assert [x.kind for x in d] == ["worker_lost", "need_worker"]  # retried: no error object
    assert d[0].running_tasks == [tid(1)] and d[0].actor_id is None
    m.worker_registered(2, 1002)
    [retry] = of_kind(m.decisions(), "dispatch_task")
    assert (retry.worker, retry.task_id, retry.retries_left, retry.attempt) == (2, tid(1), 0, 1)
    m.client_gone(2, worker=True, pid=1002)
    d = m.decisions()
    assert errors(d) == {oid(1): "WORKER_DIED"}
    [error] = of_kind(d, "store_error")
    assert "pid 1002" in error.message and "test-node" in error.message


def test_retry_exception_resubmits_until_none_left() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)], max_retries=1)
    m.decisions()
    m.task_done(1, tid(1), retry=True)
    assert dispatched(m.decisions()) == [(1, tid(1))]
    m.task_done(1, tid(1), retry=True)
    assert errors(m.decisions()) == {oid(1): "WORKER_DIED"}


def test_a_leaving_worker_takes_no_new_task() -> None:
    # A worker that exits after its task (max_calls, or a CUDA view fixed for good) is not
    # given the next ready task: that one waits for another worker instead of being lost
    # with the leaving one (and retried, or failed when it has no retries).
    m = manager(workers=1)
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)])
    m.submit(tid(2), {"CPU": 1}, return_ids=[oid(2)])
    assert dispatched(m.decisions()) == [(1, tid(1))]
    m.task_done(1, tid(1), exiting=True)
    d = m.decisions()
    assert dispatched(d) == [] and errors(d) == {}
    m.worker_registered(2, 1002)
    assert dispatched(m.decisions()) == [(2, tid(2))]


def test_killed_worker_fails_its_task_with_the_hosts_tag() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)])
    m.decisions()
    m.set_kill_reason(1, "OUT_OF_MEMORY", "the node ran low on memory")
    m.client_gone(1, worker=True)
    [error] = of_kind(m.decisions(), "store_error")
    assert error.tag == "OUT_OF_MEMORY"
    assert error.message.startswith("the node ran low on memory (task ")


def test_take_task_moves_pins_and_handles_to_the_keeper() -> None:
    m = manager(workers=0)
    m.submit(
        tid(1),
        {"CPU": 1},
        return_ids=[oid(1)],
        pins=[oid(2)],
        actor_handles=[aid(1)],
        max_retries=3,
    )
    assert [(x.kind, x.held) for x in of_kind(m.decisions(), "actor_handles")] == [
        ("actor_handles", True)
    ]
    taken = m.take_task(tid(1), keeper=7)
    assert taken is not None
    assert (taken["return_ids"], taken["max_retries"]) == ([oid(1)], 3)
    assert (taken["kept_pins"], taken["kept_handles"]) == ([oid(2)], [aid(1)])
    d = m.decisions()
    assert of_kind(d, "release_pins")[0].object_ids == [oid(2)]  # the keeper pins them now
    assert of_kind(d, "actor_handles") == []  # the keeper holds the handle: still held
    assert m.actors_held([aid(1)]) == [True]
    m.client_gone(7)
    assert [(x.actor_id, x.held) for x in of_kind(m.decisions(), "actor_handles")] == [
        (aid(1), False)
    ]
    assert m.take_task(tid(1)) is None


# ---- actors --------------------------------------------------------------------------------


def create_actor(m: TaskManagerState, restarts: int = 0, owner: int = 0) -> list[Any]:
    m.submit(
        tid(100),
        {},
        actor_id=aid(1),
        actor_creation=True,
        return_ids=[oid(100)],
        max_retries=restarts,
        owner=owner,
    )
    d = m.decisions()
    assert dispatched(d) == [(1, tid(100))]
    m.task_done(1, tid(100))
    return d + m.decisions()


def call(m: TaskManagerState, n: int, retries: int = 0) -> None:
    m.submit(
        tid(n),
        {},
        actor_id=aid(1),
        caller_id=tid(1, b"c"),
        sequence_no=n - 1,
        return_ids=[oid(n)],
        max_retries=retries,
    )


def test_actor_creation_and_calls_run_on_its_worker() -> None:
    m = manager(workers=2)
    d = create_actor(m)
    assert [(x.actor_id, x.alive) for x in of_kind(d, "actor_state")] == [(aid(1), True)]
    call(m, 1)
    call(m, 2)
    d = m.decisions()
    assert dispatched(d) == [(1, tid(1))]  # in order, one at a time (max_concurrency 1)
    m.task_done(1, tid(1))
    assert dispatched(m.decisions()) == [(1, tid(2))]


def test_actor_restarts_then_dies_and_fails_its_calls() -> None:
    m = manager(workers=1)
    create_actor(m, restarts=1)
    call(m, 1)
    assert dispatched(m.decisions()) == [(1, tid(1))]
    m.client_gone(1, worker=True)
    d = m.decisions()
    assert errors(d) == {oid(1): "ACTOR_DIED"}  # a call is not retried
    assert [(x.actor_id, x.alive) for x in of_kind(d, "actor_state")] == [(aid(1), False)]
    m.worker_registered(2)
    [restart] = of_kind(m.decisions(), "dispatch_task")
    assert (restart.worker, restart.task_id, restart.attempt) == (2, tid(100), 1)
    m.task_done(2, tid(100))
    m.decisions()
    m.client_gone(2, worker=True)  # no restart left
    [died] = of_kind(m.decisions(), "actor_died")
    assert died.actor_id == aid(1) and "no restart is left" in died.reason
    call(m, 5)  # a call to a dead actor fails at once
    assert errors(m.decisions()) == {oid(5): "ACTOR_DIED"}


def test_a_call_with_task_retries_runs_again_on_the_restarted_actor() -> None:
    """An actor call submitted with ``max_retries`` (its actor's ``max_task_retries``)
    that was running when the actor's worker died runs again once the actor restarted;
    with no restart left, it fails with the actor."""
    m = manager(workers=1)
    create_actor(m, restarts=1)
    call(m, 1, retries=1)
    assert dispatched(m.decisions()) == [(1, tid(1))]
    m.client_gone(1, worker=True)
    assert errors(m.decisions()) == {}  # not failed: it waits for the restart
    m.worker_registered(2)
    assert dispatched(m.decisions()) == [(2, tid(100))]  # the restart first
    m.task_done(2, tid(100))
    d = m.decisions()
    [again] = of_kind(d, "dispatch_task")
    assert (again.worker, again.task_id, again.attempt) == (2, tid(1), 1)
    m.client_gone(2, worker=True)  # its one retry used, and no restart left
    assert errors(m.decisions()) == {oid(1): "ACTOR_DIED"}


def test_kill_actor_kills_its_worker_process() -> None:
    m = manager()
    create_actor(m, restarts=5)
    m.kill_actor(aid(1), no_restart=True)
    assert [(x.kind, x.worker) for x in m.decisions()] == [("kill_worker", 1)]
    m.client_gone(1, worker=True)
    assert of_kind(m.decisions(), "actor_died")  # no_restart: dead for good
    m.kill_actor(aid(1))  # already dead: nothing to do
    with pytest.raises(ObjectNotFoundError, match="no actor"):
        m.kill_actor(aid(2))


def test_call_for_an_actor_elsewhere_is_held_for_forwarding() -> None:
    m = manager()
    call(m, 1)
    [held] = of_kind(m.decisions(), "actor_task_elsewhere")
    assert (held.task_id, held.actor_id) == (tid(1), aid(1))
    taken = m.take_task(tid(1))
    assert taken is not None and taken["actor_id"] == aid(1)


def test_driver_exit_ends_its_actors() -> None:
    m = manager()
    create_actor(m, restarts=3, owner=50)
    m.client_gone(50, driver=True, pid=4242)
    assert [(x.kind, x.worker) for x in m.decisions()] == [("kill_worker", 1)]
    m.client_gone(1, worker=True)
    [died] = of_kind(m.decisions(), "actor_died")
    assert "driver (pid 4242)" in died.reason


def test_moved_actor_of_a_driver_is_reported_when_the_driver_exits() -> None:
    m = manager(workers=0)
    m.submit(tid(100), {}, actor_id=aid(1), actor_creation=True, owner=50)
    m.decisions()
    assert m.take_task(tid(100)) is not None  # not placed yet: it moves to another node
    call(m, 1)
    assert of_kind(m.decisions(), "actor_task_elsewhere")  # its calls follow it
    m.client_gone(50, driver=True, pid=4242)
    [owner] = of_kind(m.decisions(), "owner_died")
    assert (owner.client, owner.pid, owner.elsewhere) == (50, 4242, [aid(1)])


def test_handles_keep_an_actor_and_end_actor_reports_why() -> None:
    m = manager()
    create_actor(m)
    m.actor_handles(60, [aid(1)], True, scoped=True)
    assert [(x.held, x.scoped) for x in of_kind(m.decisions(), "actor_handles")] == [(True, True)]
    assert m.end_actor(aid(1), "no handle left") == "held"
    m.actor_handles(60, [aid(1)], False)
    assert [(x.held, x.scoped) for x in of_kind(m.decisions(), "actor_handles")] == [(False, True)]
    assert m.end_actor(aid(1), "no handle left") == "ended"
    assert [x.kind for x in m.decisions()] == ["kill_worker"]
    assert m.end_actor(aid(9), "x") == "unknown"


def test_handles_inside_an_object_last_until_it_is_deleted() -> None:
    m = manager()
    m.actor_handles(60, [aid(1)], True, object_id=oid(1))
    assert m.actors_held([aid(1), aid(2)]) == [True, False]
    m.decisions()
    m.object_deleted(oid(1))
    assert [(x.actor_id, x.held) for x in m.decisions()] == [(aid(1), False)]


# ---- cancel -------------------------------------------------------------------------------


def test_cancel_queued_task_fails_it_with_cancelled() -> None:
    m = manager(workers=0)
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)], pins=[oid(2)])
    m.decisions()
    assert m.cancel_task(tid(1)) == "queued"
    d = m.decisions()
    assert errors(d) == {oid(1): "CANCELLED"}
    assert of_kind(d, "release_pins")[0].object_ids == [oid(2)]


def test_cancel_running_task_interrupts_then_fails_it() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)], max_retries=3)
    m.decisions()
    assert m.cancel_task(tid(1)) == "running"
    assert [(x.kind, x.worker) for x in m.decisions()] == [("interrupt_worker", 1)]
    assert m.cancel_task(tid(1), query=True) == "cancelled"
    assert m.cancel_task(tid(1)) == "running"
    assert m.decisions() == []  # interrupted once
    m.task_done(1, tid(1))  # it finished anyway: the cancel wins
    assert errors(m.decisions()) == {oid(1): "CANCELLED"}


def test_force_cancel_kills_the_worker_and_is_not_retried() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)], max_retries=3)
    m.decisions()
    m.cancel_task(tid(1), force=True)
    assert [(x.kind, x.worker) for x in m.decisions()] == [("kill_worker", 1)]
    m.client_gone(1, worker=True)
    assert errors(m.decisions()) == {oid(1): "CANCELLED"}


def test_recursive_cancel_follows_children_here_and_elsewhere() -> None:
    m = manager(workers=1, cpus=1)
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)])
    assert dispatched(m.decisions()) == [(1, tid(1))]
    m.submit(tid(2), {"CPU": 1}, return_ids=[oid(2)], parent_worker=1)  # queued: no CPU
    m.submit(tid(3), {"CPU": 1}, return_ids=[oid(3)], parent_worker=1)
    m.decisions()
    assert m.take_task(tid(3)) is not None  # forwarded to another node
    m.decisions()
    assert m.cancel_task(tid(1), recursive=True) == "running"
    d = m.decisions()
    assert errors(d) == {oid(2): "CANCELLED"}
    [elsewhere] = of_kind(d, "cancel_elsewhere")
    assert (elsewhere.task_ids, elsewhere.force) == ([tid(3)], False)


def test_cancel_job_fails_only_its_queued_tasks() -> None:
    m = manager(workers=1, cpus=1)
    job, other = b"JOB1", b"JOB2"
    m.submit(job_task(job, 1), {"CPU": 1}, return_ids=[oid(1)])  # runs
    m.submit(job_task(job, 2), {"CPU": 1}, return_ids=[oid(2)])  # queued
    m.submit(job_task(other, 3), {"CPU": 1}, return_ids=[oid(3)])  # queued, other job
    assert dispatched(m.decisions()) == [(1, job_task(job, 1))]
    assert m.cancel_job(job, "the driver exited") == 1
    d = m.decisions()
    assert errors(d) == {oid(2): "CANCELLED"}
    assert of_kind(d, "store_error")[0].message == "the driver exited"
    assert m.cancel_job(b"", "x") == 0


# ---- bad input ------------------------------------------------------------------------------


def test_bad_input_is_refused_with_clear_errors() -> None:
    m = manager()
    with pytest.raises(ValueError, match="20 bytes"):
        m.submit(b"short", {"CPU": 1})
    with pytest.raises(ValueError, match="max_retries"):
        m.submit(tid(1), {"CPU": 1}, max_retries=-2)
    with pytest.raises(TypeError):
        m.submit(tid(1), {"CPU": 1}, no_such_argument=1)
    with pytest.raises(ValueError, match="actor_id"):
        m.submit(tid(1), {}, actor_creation=True)


# ---- tasks held for their scheduling strategy ---------------------------------------------


def test_a_task_with_a_strategy_waits_for_its_host_to_place_it_here() -> None:
    m = manager()
    m.submit(tid(1), {"CPU": 1}, return_ids=[oid(1)], scheduling="SPREAD")
    d = m.decisions()
    assert dispatched(d) == []
    [held] = of_kind(d, "task_placement")
    assert (held.task_id, held.scheduling, held.demand, held.actor_creation) == (
        tid(1),
        "SPREAD",
        {"CPU": 1.0},
        False,
    )
    assert m.place_task(tid(1)) is True
    assert dispatched(m.decisions()) == [(1, tid(1))]
    assert m.place_task(tid(1)) is False  # placed already


def test_a_task_that_cannot_be_placed_fails_as_unschedulable() -> None:
    m = manager()
    m.submit(tid(1), {}, return_ids=[oid(1), oid(2)], pins=[oid(9)], scheduling="NODE:ab:0")
    m.decisions()
    assert m.place_task(tid(1), fail="node ab is dead") is True
    d = m.decisions()
    assert errors(d) == {oid(1): "UNSCHEDULABLE", oid(2): "UNSCHEDULABLE"}
    assert [x.object_ids for x in of_kind(d, "release_pins")] == [[oid(9)]]
    assert m.take_task(tid(1)) is None


def held_actor_with_a_call() -> TaskManagerState:
    """A manager holding an actor creation with a strategy (unplaced) and one call."""
    m = manager()
    m.submit(
        tid(100),
        {},
        actor_id=aid(1),
        actor_creation=True,
        return_ids=[oid(100)],
        scheduling="SPREAD",
    )
    call(m, 1)
    m.decisions()
    return m


def test_an_actor_that_cannot_be_placed_is_dead_with_its_calls() -> None:
    m = held_actor_with_a_call()
    assert m.place_task(tid(100), fail="the actor cannot be scheduled: no node") is True
    d = m.decisions()
    assert errors(d) == {oid(100): "ACTOR_UNSCHEDULABLE", oid(1): "ACTOR_UNSCHEDULABLE"}
    assert [(e.actor_id, e.reason) for e in of_kind(d, "actor_died")] == [
        (aid(1), "the actor cannot be scheduled: no node")
    ]
    call(m, 2)  # later calls fail at once, with the same tag
    assert errors(m.decisions()) == {oid(2): "ACTOR_UNSCHEDULABLE"}


def test_a_held_actor_creation_taken_elsewhere_takes_its_calls_along() -> None:
    m = held_actor_with_a_call()
    taken = m.take_task(tid(100))
    assert taken is not None and taken["scheduling"] == "SPREAD"
    assert taken["return_ids"] == [oid(100)]
    d = m.decisions()
    assert [e.task_id for e in of_kind(d, "actor_task_elsewhere")] == [tid(1)]
    assert dispatched(d) == []
