"""Unit tests of ``SchedulerState``: per-instance grants of GPUs and CPU labels, and
workers blocked in ``get`` lending their CPU (nested tasks never deadlock).

Driven as a state machine as in ``test_scheduler.py``: no processes, sockets or threads.
"""

from __future__ import annotations

import pytest
from scheduler_helpers import dispatched, dispatched_ids, of_kind, with_workers
from store_test_ids import tid

from rayfield.store._native import SchedulerState

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
