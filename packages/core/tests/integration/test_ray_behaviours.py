"""Ray behaviours with real workers: retry_exceptions, cancel of running tasks, errors
through dependencies, unschedulable work, wait's signatures, the runtime context and
get_resource_ids."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import rayfield as rf
from rayfield.exceptions import (
    ActorUnschedulableError,
    TaskCancelledError,
    TaskError,
    TaskUnschedulableError,
)
from rayfield.testing import wait_for
from rayfield.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@pytest.fixture
def one_cpu(tmp_path: Path, no_worker_left: None) -> Iterator[Any]:
    """A 1-CPU local runtime with two fake GPUs: one plain task runs at a time."""
    info = rf.init(num_cpus=1, num_gpus=2, object_store_memory=128 << 20, temp_dir=str(tmp_path))
    try:
        yield info
    finally:
        rf.shutdown()


def _attempts(path: Path) -> int:
    return len(path.read_text()) if path.exists() else 0


# ---- retry_exceptions ------------------------------------------------------------------


class Flaky(Exception):
    pass


@rf.remote(max_retries=3, retry_exceptions=True)
def fails_then_succeeds(log: str, failures: int) -> int:
    with open(log, "a") as f:
        f.write("x")
    n = len(Path(log).read_text())
    if n <= failures:
        raise Flaky(f"attempt {n}")
    return n


def test_retry_exceptions_retries_until_success(one_cpu: Any, tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    assert rf.get(fails_then_succeeds.remote(str(log), 2), timeout=30) == 3
    assert _attempts(log) == 3


def test_retry_exceptions_raises_the_last_error_when_retries_run_out(
    one_cpu: Any, tmp_path: Path
) -> None:
    log = tmp_path / "b.log"
    ref = fails_then_succeeds.options(max_retries=2).remote(str(log), 100)
    with pytest.raises(Flaky) as info:
        rf.get(ref, timeout=30)
    assert isinstance(info.value, TaskError)
    assert "attempt 3" in str(info.value)  # the last run's error
    assert _attempts(log) == 3  # max_retries + 1 runs


def test_retry_exceptions_list_retries_only_the_listed_classes(
    one_cpu: Any, tmp_path: Path
) -> None:
    log = tmp_path / "c.log"
    ref = fails_then_succeeds.options(retry_exceptions=[KeyError, ValueError]).remote(str(log), 1)
    with pytest.raises(Flaky):
        rf.get(ref, timeout=30)
    assert _attempts(log) == 1  # Flaky is not listed: no retry
    log2 = tmp_path / "d.log"
    ref = fails_then_succeeds.options(retry_exceptions=(Flaky,)).remote(str(log2), 1)
    assert rf.get(ref, timeout=30) == 2


@rf.remote(retry_exceptions=True)
def crashes_then_fails_then_succeeds(log: str) -> int:
    with open(log, "a") as f:
        f.write("x")
    n = len(Path(log).read_text())
    if n == 1:
        os._exit(1)  # the worker dies: a retry
    if n == 2:
        raise Flaky("attempt 2")  # an exception: a retry from the same budget
    return n


def test_worker_deaths_and_exceptions_share_max_retries(one_cpu: Any, tmp_path: Path) -> None:
    ok = crashes_then_fails_then_succeeds.options(max_retries=2).remote(str(tmp_path / "a"))
    assert rf.get(ok, timeout=60) == 3
    short = crashes_then_fails_then_succeeds.options(max_retries=1).remote(str(tmp_path / "b"))
    with pytest.raises(Flaky):
        rf.get(short, timeout=60)
    assert _attempts(tmp_path / "b") == 2


def test_exceptions_are_not_retried_by_default(one_cpu: Any, tmp_path: Path) -> None:
    log = tmp_path / "e.log"
    ref = fails_then_succeeds.options(retry_exceptions=False).remote(str(log), 1)
    with pytest.raises(Flaky):
        rf.get(ref, timeout=30)
    assert _attempts(log) == 1


def test_retry_exceptions_rejects_other_values() -> None:
    for bad in ("yes", 1, [KeyError, "x"], [int], 0.5):
        with pytest.raises(TypeError, match="retry_exceptions"):
            rf.remote(retry_exceptions=bad)(lambda: None)
    with pytest.raises(TypeError, match="retry_exceptions"):
        fails_then_succeeds.options(retry_exceptions="always")


# ---- cancel ----------------------------------------------------------------------------


@rf.remote
def spin(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(0.01)


@rf.remote
def pid() -> int:
    return os.getpid()


def _wait_for(path: Path, timeout_s: float = 30) -> str:
    def written() -> str:
        return path.read_text() if path.exists() else ""

    return wait_for(written, timeout_s, f"{path} to be written", interval=0.01)


def test_cancel_interrupts_a_running_task_and_the_worker_survives(
    one_cpu: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "spin"
    ref = spin.remote(str(marker))
    worker_pid = int(_wait_for(marker))
    rf.cancel(ref)
    with pytest.raises(TaskCancelledError):  # spin never returns: only the cancel ends it
        rf.get(ref, timeout=30)
    assert rf.get(pid.remote(), timeout=10) == worker_pid  # the same worker runs on
    rf.cancel(ref)  # a finished task: nothing happens
    with pytest.raises(TaskCancelledError):
        rf.get(ref, timeout=1)


def test_cancel_with_force_kills_the_worker(one_cpu: Any, tmp_path: Path) -> None:
    marker = tmp_path / "spin"
    ref = spin.remote(str(marker))
    worker_pid = int(_wait_for(marker))
    rf.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError):
        rf.get(ref, timeout=10)
    assert rf.get(pid.remote(), timeout=30) != worker_pid
    assert not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == "zombie"


def test_cancel_of_a_finished_task_keeps_its_result(one_cpu: Any) -> None:
    ref = pid.remote()
    value = rf.get(ref, timeout=10)
    rf.cancel(ref)
    assert rf.get(ref, timeout=10) == value


def test_cancelled_queued_task_never_runs(one_cpu: Any, tmp_path: Path) -> None:
    marker, never = tmp_path / "spin", tmp_path / "never"
    running = spin.remote(str(marker))
    _wait_for(marker)
    queued = spin.remote(str(never))  # the only CPU is busy
    rf.cancel(queued)
    rf.cancel(running)
    for ref in (queued, running):
        with pytest.raises(TaskCancelledError):
            rf.get(ref, timeout=10)
    assert rf.get(pid.remote(), timeout=10) > 0  # the node went on: the queue is empty
    assert not never.exists()


@rf.remote(num_cpus=0)
def parent(marker: str, how: str = "get") -> Any:
    child = spin.remote(marker)
    return rf.get(child) if how == "get" else rf.wait([child])


def test_recursive_cancel_reaches_the_tasks_a_task_submitted(one_cpu: Any, tmp_path: Path) -> None:
    marker = tmp_path / "child"
    ref = parent.remote(str(marker))
    child_pid = int(_wait_for(marker))
    rf.cancel(ref)
    with pytest.raises(TaskCancelledError):
        rf.get(ref, timeout=10)
    # The child is cancelled too (interrupted: its worker lives), so the only CPU is free.
    assert rf.get(pid.remote(), timeout=10) > 0
    assert psutil.Process(child_pid).status() != "zombie"


@pytest.mark.parametrize("how", ["get", "wait"])
def test_non_recursive_cancel_leaves_the_children(one_cpu: Any, tmp_path: Path, how: str) -> None:
    marker = tmp_path / "child"
    ref = parent.remote(str(marker), how)  # blocked in rf.get / rf.wait when cancelled
    _wait_for(marker)
    rf.cancel(ref, recursive=False)
    with pytest.raises(TaskCancelledError):
        rf.get(ref, timeout=10)
    with pytest.raises(rf.exceptions.GetTimeoutError):  # the child still holds the CPU
        rf.get(pid.remote(), timeout=1)


# ---- errors through dependencies -------------------------------------------------------


@rf.remote
def raise_key_error() -> int:
    raise KeyError("lost")


@rf.remote
def add_one(x: int) -> int:
    return x + 1


@rf.remote
def get_inside(refs: list[Any]) -> int:
    return int(rf.get(refs[0])) + 1


def test_errors_through_dependencies_keep_their_type(one_cpu: Any) -> None:
    a = raise_key_error.remote()
    b = add_one.remote(a)
    c = add_one.remote(b)
    for ref in (a, b, c):
        with pytest.raises(KeyError) as info:
            rf.get(ref, timeout=10)
        assert isinstance(info.value, TaskError)
        assert "raise_key_error" in str(info.value)
    nested = get_inside.remote([a])  # a task's own get of a failed result, not caught
    with pytest.raises(KeyError) as info:
        rf.get(nested, timeout=10)
    assert isinstance(info.value, TaskError) and "get_inside" in str(info.value)


# ---- unschedulable work ----------------------------------------------------------------


@rf.remote
class Pinned:
    def pid(self) -> int:
        return os.getpid()


def test_hard_affinity_to_another_node_fails_with_typed_errors(one_cpu: Any) -> None:
    elsewhere = NodeAffinitySchedulingStrategy("ab" * 20, soft=False)
    task = add_one.options(scheduling_strategy=elsewhere).remote(1)
    with pytest.raises(TaskUnschedulableError, match="the task cannot be scheduled"):
        rf.get(task, timeout=30)
    actor = Pinned.options(scheduling_strategy=elsewhere).remote()
    for _ in range(2):  # a call made at once, then one made after the actor failed
        with pytest.raises(ActorUnschedulableError, match="the actor cannot be scheduled"):
            rf.get(actor.pid.remote(), timeout=30)
    assert rf.get(add_one.remote(1), timeout=30) == 2  # the node still runs other work


# ---- wait -----------------------------------------------------------------------------


def test_wait_positional_and_fetch_local(one_cpu: Any, tmp_path: Path) -> None:
    done = [add_one.remote(i) for i in range(2)]
    rf.get(done, timeout=10)
    slow = spin.remote(str(tmp_path / "spin"))
    ready, rest = rf.wait([*done, slow], 2, 5)
    assert ready == done and rest == [slow]
    ready, rest = rf.wait([slow, done[0]], 1, 0.2, fetch_local=True)
    assert ready == [done[0]] and rest == [slow]
    ready, rest = rf.wait([slow], num_returns=1, timeout=0.1, fetch_local=False)
    assert ready == [] and rest == [slow]
    with pytest.raises(TypeError, match="fetch_local"):
        rf.wait(done, fetch_local="yes")  # type: ignore[arg-type]
    rf.cancel(slow)


# ---- runtime context -------------------------------------------------------------------


@rf.remote
def context_in_task() -> dict[str, Any]:
    ctx = rf.get_runtime_context()
    return {
        "job": ctx.get_job_id(),
        "task": ctx.get_task_id(),
        "actor": ctx.get_actor_id(),
        "node": ctx.get_node_id(),
        "worker": ctx.get_worker_id(),
        "resources": ctx.get_assigned_resources(),
        "accelerators": ctx.get_accelerator_ids(),
        "classic": (ctx.job_id.hex(), ctx.task_id, ctx.node_id),
        "pid": os.getpid(),
    }


@rf.remote(num_gpus=1, max_restarts=1)
class Probe:
    def context(self) -> dict[str, Any]:
        ctx = rf.get_runtime_context()
        return {
            "job": ctx.get_job_id(),
            "actor": ctx.get_actor_id(),
            "task": ctx.get_task_id(),
            "resources": ctx.get_assigned_resources(),
            "accelerators": ctx.get_accelerator_ids(),
            "reconstructed": ctx.was_current_actor_reconstructed,
            "pid": os.getpid(),
        }

    def me(self) -> Any:
        return rf.get_runtime_context().current_actor

    def echo(self, x: int) -> int:
        return x


def test_runtime_context_in_driver_task_and_actor(one_cpu: Any) -> None:
    ctx = rf.get_runtime_context()
    job, node = ctx.get_job_id(), ctx.get_node_id()
    assert len(job) == 24 and len(node) == 40 and ctx.job_id == job and ctx.job_id.hex() == job
    assert ctx.get_task_id() is None and ctx.get_actor_id() is None
    assert ctx.get_worker_id() == ctx.get_worker_id()
    assert ctx.namespace == "" and ctx.get_assigned_resources() == {}
    with pytest.raises(RuntimeError, match="inside an actor"):
        _ = ctx.current_actor

    t = rf.get(context_in_task.remote(), timeout=10)
    assert t["job"] == job and t["node"] == node and t["actor"] is None
    assert t["task"] and len(t["task"]) == 40 and t["worker"] != ctx.get_worker_id()
    assert t["resources"] == {"CPU": 1.0} and t["accelerators"] == {"GPU": []}
    assert t["classic"] == (job, t["task"], node)

    probe = Probe.remote()
    a = rf.get(probe.context.remote(), timeout=10)
    assert a["job"] == job and a["actor"] == probe._actor_id.hex() and a["task"] != t["task"]
    assert a["resources"] == {"GPU": 1.0} and a["accelerators"] == {"GPU": ["0"]}
    assert a["reconstructed"] is False
    me = rf.get(probe.me.remote(), timeout=10)
    assert me == probe and rf.get(me.echo.remote(7), timeout=10) == 7

    psutil.Process(a["pid"]).kill()  # max_restarts=1: it comes back

    def context_again() -> Any:
        try:
            return rf.get(probe.context.remote(), timeout=10)
        except rf.exceptions.ActorDiedError:  # calls in flight when it died
            return None

    again = wait_for(context_again, 30, "the restarted actor to answer", interval=0)
    assert again["pid"] != a["pid"] and again["reconstructed"] is True


# ---- get_resource_ids ------------------------------------------------------------------


@rf.remote
def resource_ids() -> dict[str, list[tuple[int, float]]]:
    return rf.get_resource_ids()


def test_get_resource_ids_in_tasks(one_cpu: Any) -> None:
    assert rf.get_resource_ids() == {}  # a driver holds nothing
    assert rf.get(resource_ids.remote(), timeout=10) == {"CPU": [(0, 1.0)]}
    half = rf.get(resource_ids.options(num_cpus=0.5, num_gpus=0.5).remote(), timeout=10)
    assert half == {"CPU": [(0, 0.5)], "GPU": [(0, 0.5)]}
    two = rf.get(resource_ids.options(num_cpus=0, num_gpus=2).remote(), timeout=10)
    assert two == {"GPU": [(0, 1.0), (1, 1.0)]}


def test_concurrent_tasks_hold_distinct_cpus(tmp_path: Path, no_worker_left: None) -> None:
    rf.init(num_cpus=2, object_store_memory=128 << 20, temp_dir=str(tmp_path))
    try:

        @rf.remote
        def hold(marker: str, release: str) -> Any:
            Path(marker).write_text("1")
            while not Path(release).exists():
                time.sleep(0.01)
            return rf.get_resource_ids()["CPU"]

        release = tmp_path / "release"
        refs = [hold.remote(str(tmp_path / f"m{i}"), str(release)) for i in range(2)]
        for i in range(2):
            _wait_for(tmp_path / f"m{i}")
        release.write_text("go")
        got = sorted(rf.get(refs, timeout=10))
        assert got == [[(0, 1.0)], [(1, 1.0)]]
    finally:
        rf.shutdown()
