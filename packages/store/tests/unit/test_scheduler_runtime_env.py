"""Unit tests of the scheduler's runtime_env keying (``SchedulerState``): a task runs only
on a worker of its runtime_env, and ``need_worker`` says which runtime_env lacks workers.

No processes: the scheduler is driven directly, as in ``test_scheduler.py``.
"""

from __future__ import annotations

from scheduler_helpers import dispatched, of_kind
from store_test_ids import aid, tid

from rayfield.store._native import SchedulerState

ENV_A = '{"env_vars":{"X":"a"}}'
ENV_B = '{"env_vars":{"X":"b"}}'


def test_task_waits_for_a_worker_of_its_runtime_env() -> None:
    s = SchedulerState({"CPU": 4})
    s.add_worker(1)  # a default worker stays idle
    s.submit(tid(1), {"CPU": 1}, runtime_env=ENV_A)
    decisions = s.decisions()
    assert dispatched(decisions) == []
    assert of_kind(decisions, "need_worker") == [("need_worker", {"CPU": 1.0}, 1, ENV_A)]
    s.add_worker(2, runtime_env=ENV_A)
    assert dispatched(s.decisions()) == [(2, tid(1))]
    assert s.snapshot()["workers"] == {1: "idle", 2: "busy"}


def test_default_task_never_goes_to_a_worker_of_another_runtime_env() -> None:
    s = SchedulerState({"CPU": 4})
    s.add_worker(1, runtime_env=ENV_A)
    s.submit(tid(1), {"CPU": 1})
    decisions = s.decisions()
    assert dispatched(decisions) == []
    assert of_kind(decisions, "need_worker") == [("need_worker", {"CPU": 1.0}, 1)]
    s.add_worker(2)
    assert dispatched(s.decisions()) == [(2, tid(1))]


def test_workers_alternate_only_within_their_runtime_env() -> None:
    s = SchedulerState({"CPU": 4})
    s.add_worker(1, runtime_env=ENV_A)
    s.add_worker(2, runtime_env=ENV_B)
    for i in range(6):
        s.submit(tid(10 + i), {"CPU": 1}, runtime_env=ENV_A if i % 2 == 0 else ENV_B)
        [(worker, task)] = dispatched(s.decisions())
        assert worker == (1 if i % 2 == 0 else 2)
        s.task_finished(worker, task)


def test_need_worker_per_runtime_env_counts_each() -> None:
    s = SchedulerState({"CPU": 8})
    for i in range(3):
        s.submit(tid(i), {"CPU": 1}, runtime_env=ENV_A)
    for i in range(2):
        s.submit(tid(10 + i), {"CPU": 1}, runtime_env=ENV_B)
    s.submit(tid(20), {"CPU": 1})
    needs = sorted(of_kind(s.decisions(), "need_worker"), key=len)
    assert ("need_worker", {"CPU": 1.0}, 1) in needs
    assert ("need_worker", {"CPU": 1.0}, 3, ENV_A) in needs
    assert ("need_worker", {"CPU": 1.0}, 2, ENV_B) in needs
    assert len(needs) == 3


def test_actor_creation_binds_a_worker_of_its_runtime_env() -> None:
    s = SchedulerState({"CPU": 2})
    s.add_worker(1)
    s.submit(tid(1), {"CPU": 1}, actor_id=aid(1), actor_creation=True, runtime_env=ENV_A)
    assert dispatched(s.decisions()) == []
    s.add_worker(2, runtime_env=ENV_A)
    assert dispatched(s.decisions()) == [(2, tid(1))]


def test_take_task_keeps_its_runtime_env() -> None:
    s = SchedulerState({"CPU": 1})
    s.submit(tid(1), {"CPU": 1}, runtime_env=ENV_B)
    spec = s.take_task(tid(1))
    assert spec is not None and spec["runtime_env"] == ENV_B
