"""Unit tests of the local scheduler state machine (``SchedulerState``).

The scheduler is driven directly: events in (submit, object_available, worker
changes), decisions out (``decisions()``). No processes, sockets or threads.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from store_test_ids import aid, cid, oid, tid

from rayfield.store._native import SchedulerState


def of_kind(decisions: list[tuple[Any, ...]], kind: str) -> list[tuple[Any, ...]]:
    return [d for d in decisions if d[0] == kind]


def dispatched(decisions: list[tuple[Any, ...]]) -> list[tuple[int, bytes]]:
    """(worker, task_id) of each dispatch, in order."""
    return [(d[1], d[2]) for d in of_kind(decisions, "dispatch")]


def dispatched_ids(decisions: list[tuple[Any, ...]]) -> list[bytes]:
    return [task for _, task in dispatched(decisions)]


def with_workers(total: dict[str, float], n: int) -> SchedulerState:
    s = SchedulerState(total)
    for w in range(1, n + 1):
        s.add_worker(w)
    return s


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
    order = dispatched_ids(s.decisions())
    for _ in range(3):
        s.task_finished(1, order[-1])
        order += dispatched_ids(s.decisions())
    assert order == [tid(0), tid(1), tid(2), tid(3)]


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


# ---- GPU instances -------------------------------------------------------------------


def test_whole_gpus_get_distinct_indices() -> None:
    s = with_workers({"CPU": 8, "GPU": 4}, 4)
    s.submit(tid(1), {"GPU": 2})
    s.submit(tid(2), {"GPU": 1})
    s.submit(tid(3), {"GPU": 2})
    decisions = s.decisions()
    assert of_kind(decisions, "dispatch") == [
        ("dispatch", 1, tid(1), [("GPU", 0, 1.0), ("GPU", 1, 1.0)]),
        ("dispatch", 2, tid(2), [("GPU", 2, 1.0)]),
    ]
    s.task_finished(1, tid(1))
    assert of_kind(s.decisions(), "dispatch") == [
        ("dispatch", 1, tid(3), [("GPU", 0, 1.0), ("GPU", 1, 1.0)])
    ]


def test_fractional_gpus_pack_onto_one_device() -> None:
    s = with_workers({"GPU": 2}, 6)
    s.submit(tid(1), {"GPU": 0.3})
    s.submit(tid(2), {"GPU": 0.5})
    s.submit(tid(3), {"GPU": 1})
    s.submit(tid(4), {"GPU": 0.3})  # device 0 has 0.2 left, device 1 is taken
    s.submit(tid(5), {"GPU": 0.2})
    grants = {t: g for _, _, t, g in of_kind(s.decisions(), "dispatch")}
    assert grants == {
        tid(1): [("GPU", 0, 0.3)],
        tid(2): [("GPU", 0, 0.5)],
        tid(3): [("GPU", 1, 1.0)],
        tid(5): [("GPU", 0, pytest.approx(0.2))],
    }
    assert "GPU" not in s.available()
    s.task_finished(3, tid(3))
    assert of_kind(s.decisions(), "dispatch") == [("dispatch", 3, tid(4), [("GPU", 1, 0.3)])]


def test_fraction_prefers_a_shared_device_over_a_free_one() -> None:
    s = with_workers({"GPU": 2}, 3)
    s.submit(tid(1), {"GPU": 1})
    s.submit(tid(2), {"GPU": 0.5})
    assert [g for *_, g in of_kind(s.decisions(), "dispatch")] == [
        [("GPU", 0, 1.0)],
        [("GPU", 1, 0.5)],
    ]
    s.task_finished(1, tid(1))
    s.submit(tid(3), {"GPU": 0.5})  # device 0 is free again, device 1 has room: pack
    s.submit(tid(4), {"GPU": 1})  # and device 0 stays free for a whole GPU
    assert [g for *_, g in of_kind(s.decisions(), "dispatch")] == [
        [("GPU", 1, 0.5)],
        [("GPU", 0, 1.0)],
    ]


def test_whole_gpu_needs_an_entirely_free_device() -> None:
    s = with_workers({"GPU": 2}, 3)
    s.submit(tid(1), {"GPU": 0.5})
    s.submit(tid(2), {"GPU": 0.5})  # packs with tid(1) on device 0
    s.submit(tid(3), {"GPU": 1})
    assert [g for *_, g in of_kind(s.decisions(), "dispatch")] == [
        [("GPU", 0, 0.5)],
        [("GPU", 0, 0.5)],
        [("GPU", 1, 1.0)],
    ]
    s2 = with_workers({"GPU": 2}, 3)
    s2.submit(tid(1), {"GPU": 0.6})
    s2.submit(tid(2), {"GPU": 0.6})  # device 0 too full: device 1
    s2.submit(tid(3), {"GPU": 1})  # 0.8 available in total but no free device
    assert dispatched_ids(s2.decisions()) == [tid(1), tid(2)]
    assert s2.available()["GPU"] == pytest.approx(0.8)
    s2.task_finished(1, tid(1))
    assert of_kind(s2.decisions(), "dispatch") == [("dispatch", 1, tid(3), [("GPU", 0, 1.0)])]


# ---- CPU labels (classic get_resource_ids) ----------------------------------------------


def test_concurrent_tasks_get_distinct_cpu_labels() -> None:
    s = with_workers({"CPU": 4}, 3)
    s.submit(tid(1), {"CPU": 2})
    s.submit(tid(2), {"CPU": 1})
    s.submit(tid(3), {"CPU": 1})
    grants = {t: g for _, _, t, g in of_kind(s.decisions(), "dispatch")}
    assert grants == {
        tid(1): [("CPU", 0, 1.0), ("CPU", 1, 1.0)],
        tid(2): [("CPU", 2, 1.0)],
        tid(3): [("CPU", 3, 1.0)],
    }
    s.task_finished(2, tid(2))
    s.submit(tid(4), {"CPU": 1})
    assert of_kind(s.decisions(), "dispatch") == [("dispatch", 2, tid(4), [("CPU", 2, 1.0)])]


def test_fractional_cpus_share_a_label() -> None:
    s = with_workers({"CPU": 2}, 3)
    s.submit(tid(1), {"CPU": 0.5})
    s.submit(tid(2), {"CPU": 0.5})
    s.submit(tid(3), {"CPU": 1})
    assert [g for *_, g in of_kind(s.decisions(), "dispatch")] == [
        [("CPU", 0, 0.5)],
        [("CPU", 0, 0.5)],
        [("CPU", 1, 1.0)],
    ]


def test_cpu_labels_never_hold_a_task_back() -> None:
    """CPU is scheduled by amount: a task that fits gets labels even when no free ones
    fit (here the CPU a blocked worker lent), on the least used CPU."""
    s = with_workers({"CPU": 2}, 3)
    s.submit(tid(1), {"CPU": 0.6})
    s.submit(tid(2), {"CPU": 0.6})  # CPU 0 has only 0.4 left: CPU 1
    s.submit(tid(3), {"CPU": 0.8})  # 0.8 free in all but on no one CPU: runs anyway
    grants = {t: g for _, _, t, g in of_kind(s.decisions(), "dispatch")}
    assert grants[tid(1)] == [("CPU", 0, 0.6)]
    assert grants[tid(2)] == [("CPU", 1, 0.6)]
    assert grants[tid(3)] == [("CPU", 0, pytest.approx(0.8))]
    s.task_finished(1, tid(1))
    s.task_finished(2, tid(2))
    s.task_finished(3, tid(3))
    s.submit(tid(4), {"CPU": 2})  # every label is free again
    assert [g for *_, g in of_kind(s.decisions(), "dispatch")] == [
        [("CPU", 0, 1.0), ("CPU", 1, 1.0)]
    ]


# ---- blocked workers -----------------------------------------------------------------


def test_blocked_worker_lends_cpu_and_takes_it_back() -> None:
    s = with_workers({"CPU": 2, "GPU": 1}, 2)
    s.submit(tid(1), {"CPU": 2, "GPU": 1})
    s.submit(tid(2), {"CPU": 1})
    assert dispatched_ids(s.decisions()) == [tid(1)]
    s.set_worker_blocked(1, True)
    assert s.snapshot()["workers"][1] == "blocked"
    assert dispatched(s.decisions()) == [(2, tid(2))]
    assert s.available() == {"CPU": 1}  # the GPU is not lent
    s.set_worker_blocked(1, False)  # oversubscribes: 2 + 1 CPUs in use
    assert s.available() == {"CPU": -1}
    assert s.snapshot()["workers"][1] == "busy"
    s.task_finished(2, tid(2))
    s.task_finished(1, tid(1))
    assert s.available() == {"CPU": 2, "GPU": 1}


def test_task_finishing_while_blocked_does_not_return_cpu_twice() -> None:
    s = with_workers({"CPU": 1}, 1)
    s.submit(tid(1), {"CPU": 1})
    s.set_worker_blocked(1, True)
    s.set_worker_blocked(1, True)  # repeated: no second loan
    assert s.available() == {"CPU": 1}
    s.task_finished(1, tid(1))
    assert s.available() == {"CPU": 1}
    assert s.snapshot()["workers"] == {1: "idle"}


def run_nested(s: SchedulerState, depth: int, fanout: int, max_steps: int = 10_000) -> int:
    """Host loop: each task with depth > 0 submits `fanout` children and blocks
    until they finish; a new worker starts on every need_worker. Returns the
    number of tasks run."""
    info: dict[bytes, tuple[int, bytes | None]] = {}  # task -> (depth, parent)
    open_children: dict[bytes, int] = {}
    on_worker: dict[bytes, int] = {}
    counter = [0]
    next_worker = [1]
    finished: list[bytes] = []

    def submit(depth: int, parent: bytes | None) -> None:
        counter[0] += 1
        task = tid(counter[0])
        info[task] = (depth, parent)
        s.submit(task, {"CPU": 1})

    submit(depth, None)
    to_finish: list[bytes] = []
    for _ in range(max_steps):
        for d in s.decisions():
            if d[0] == "need_worker":
                for _ in range(d[2]):
                    s.add_worker(next_worker[0])
                    next_worker[0] += 1
            elif d[0] == "dispatch":
                task = d[2]
                on_worker[task] = d[1]
                if info[task][0] == 0:
                    to_finish.append(task)
                else:
                    open_children[task] = fanout
                    for _ in range(fanout):
                        submit(info[task][0] - 1, task)
                    s.set_worker_blocked(d[1], True)
        if not to_finish:
            if len(finished) == len(info):
                return len(finished)
            continue
        task = to_finish.pop(0)
        s.task_finished(on_worker[task], task)
        finished.append(task)
        parent = info[task][1]
        if parent is not None:
            open_children[parent] -= 1
            if open_children[parent] == 0:
                s.set_worker_blocked(on_worker[parent], False)
                to_finish.append(parent)
    raise AssertionError(f"deadlock: {len(finished)} of {len(info)} tasks finished")


def test_nested_tasks_never_deadlock_on_two_cpus() -> None:
    s = SchedulerState({"CPU": 2})
    assert run_nested(s, depth=3, fanout=2) == 15
    assert s.available() == {"CPU": 2}
    snap = s.snapshot()
    assert snap["running"] == 0 and snap["ready_by_shape"] == []
    assert set(snap["workers"].values()) == {"idle"}


# ---- actors --------------------------------------------------------------------------


def create_actor(
    s: SchedulerState, actor: bytes, worker: int, max_concurrency: int = 1, **resources: float
) -> None:
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
    s.submit(tid(n), actor_id=actor, caller_id=caller, sequence_no=seq, **kw)
    return tid(n)


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
    order = dispatched_ids(s.decisions())
    for _ in range(2):
        s.task_finished(1, order[-1])
        order += dispatched_ids(s.decisions())
    assert order == [tid(0), tid(1), tid(2)]


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
    order = dispatched_ids(s.decisions())
    for _ in range(2):
        s.task_finished(1, order[-1])
        order += dispatched_ids(s.decisions())
    assert order == [tid(0), tid(1), tid(2)]


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
