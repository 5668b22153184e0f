"""The core API against a real local cluster: tasks, objects, actors, errors."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rayfield as rf
from rayfield.exceptions import GetTimeoutError, TaskError, WorkerCrashedError
from rayfield.testing import wait_for


@rf.remote
def square(x: int) -> int:
    return x * x


@rf.remote(num_returns=2)
def pair(x: int) -> tuple[int, int]:
    return x, -x


@rf.remote
def array_sum(a: np.ndarray) -> float:
    return float(a.sum())


@rf.remote
class Counter:
    def __init__(self, start: int = 0) -> None:
        self.n = start

    def inc(self, k: int = 1) -> int:
        self.n += k
        return self.n

    @rf.method(num_returns=2)
    def both(self) -> tuple[int, int]:
        return self.n, -self.n


def test_tasks_and_arguments(cluster: Any) -> None:
    assert rf.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)]
    a, b = pair.remote(3)
    assert rf.get([a, b]) == [3, -3]
    assert rf.get(square.remote(rf.put(7))) == 49
    assert rf.get(square.remote(square.remote(2))) == 16  # a ref argument is resolved
    big = np.arange(100_000, dtype=np.float64)  # > inline size: travels through the store
    assert rf.get(array_sum.remote(big)) == big.sum()
    assert rf.get(pair.options(num_returns=2).remote(1)) is not None


def test_put_get_zero_copy_and_read_only(cluster: Any) -> None:
    a = np.random.default_rng(0).random((512, 512))
    ref = rf.put(a)
    b = rf.get(ref)
    c = rf.get(ref)
    assert np.array_equal(a, b) and not b.flags.writeable
    assert b.__array_interface__["data"][0] == c.__array_interface__["data"][0]
    with pytest.raises(ValueError):
        b[0, 0] = 1.0
    nested = rf.get(rf.put({"x": [a, a], "s": "text"}))
    assert nested["x"][0] is nested["x"][1]  # aliasing preserved


def test_nested_refs_stay_refs(cluster: Any) -> None:
    inner = rf.put(41)
    outer = rf.get(rf.put([inner]))
    assert isinstance(outer[0], rf.ObjectRef) and rf.get(outer[0]) == 41
    assert len({inner, rf.ObjectRef(inner.binary())}) == 1
    assert repr(inner).startswith("ObjectRef(")


def test_wait_semantics(cluster: Any) -> None:
    @rf.remote
    def sleepy(s: float) -> float:
        time.sleep(s)
        return s

    fast, slow = sleepy.remote(0), sleepy.remote(60)
    ready, rest = rf.wait([slow, fast], num_returns=1, timeout=20)
    assert ready == [fast] and rest == [slow]
    ready, rest = rf.wait([slow, fast], num_returns=2, timeout=0.1)
    assert ready == [fast] and rest == [slow]
    rf.cancel(slow, force=True)
    with pytest.raises(ValueError):
        rf.wait([fast, fast])
    with pytest.raises(ValueError):
        rf.wait([fast], num_returns=2)
    assert rf.wait([]) == ([], [])


def test_task_error_is_the_original_class_with_remote_traceback(cluster: Any) -> None:
    @rf.remote
    def fail(msg: str) -> None:
        raise KeyError(msg)

    with pytest.raises(KeyError) as info:
        rf.get(fail.remote("missing"))
    err = info.value
    assert isinstance(err, TaskError)
    assert "fail" in str(err) and "KeyError" in err.traceback_str
    assert err.pid != os.getpid()
    assert rf.get(square.remote(3)) == 9  # the node keeps working


def test_get_timeout(cluster: Any) -> None:
    @rf.remote
    def slow() -> int:
        time.sleep(5)
        return 1

    with pytest.raises(GetTimeoutError):
        rf.get(slow.remote(), timeout=0.2)


def test_actor_state_order_and_multiple_returns(cluster: Any) -> None:
    c = Counter.remote(10)
    refs = [c.inc.remote() for _ in range(50)]
    assert rf.get(refs) == list(range(11, 61))
    n, neg = c.both.remote()
    assert rf.get([n, neg]) == [60, -60]


def test_actor_handle_passed_to_tasks(cluster: Any) -> None:
    c = Counter.remote()

    @rf.remote
    def bump(counter: Any, times: int) -> int:
        return rf.get([counter.inc.remote() for _ in range(times)])[-1]

    rf.get([bump.remote(c, 5), bump.remote(c, 5)])
    assert rf.get(c.inc.remote(0)) == 10
    assert rf.get(rf.get(rf.put(c)).inc.remote(0)) == 10  # handles go through the store


def test_named_actor(cluster: Any) -> None:
    Counter.options(name="global").remote(5)
    assert rf.get(rf.get_actor("global").inc.remote()) == 6
    with pytest.raises(ValueError):
        Counter.options(name="global").remote()
    with pytest.raises(ValueError):
        rf.get_actor("nobody")


def test_threaded_and_async_actors_run_calls_concurrently(cluster: Any) -> None:
    # Four calls that each wait for the other three: they can only return if they overlap.
    @rf.remote(max_concurrency=4)
    class Meeting:
        def __init__(self) -> None:
            import threading

            self.barrier = threading.Barrier(4, timeout=60)

        def meet(self) -> int:
            return self.barrier.wait()  # BrokenBarrierError if the others never come

    @rf.remote
    class AsyncMeeting:
        def __init__(self) -> None:
            self.arrived = 0

        async def meet(self) -> int:
            import asyncio

            if self.arrived == 0:
                self.everyone = asyncio.Event()
            self.arrived += 1
            me = self.arrived
            if me == 4:
                self.everyone.set()
            await asyncio.wait_for(self.everyone.wait(), 60)  # TimeoutError if alone
            return me - 1

    for cls in (Meeting, AsyncMeeting):
        actor = cls.remote()
        met = rf.get([actor.meet.remote() for _ in range(4)], timeout=120)
        assert sorted(met) == [0, 1, 2, 3], cls


def test_threaded_actor_runs_max_concurrency_calls_that_wait_on_each_other(cluster: Any) -> None:
    @rf.remote(max_concurrency=6)
    class Rendezvous:
        def __init__(self) -> None:
            import threading

            self.barrier = threading.Barrier(6, timeout=20)
            self.gate = threading.Event()

        def meet(self) -> int:
            return self.barrier.wait()  # raises BrokenBarrierError unless all 6 overlap

        def hold(self) -> bool:
            return self.gate.wait(timeout=20)

        def open(self) -> int:
            self.gate.set()
            return 1

    actor = Rendezvous.remote()
    # Many quick calls first, so that one thread would run them all if it could.
    assert rf.get([actor.open.remote() for _ in range(200)]) == [1] * 200
    assert sorted(rf.get([actor.meet.remote() for _ in range(6)])) == list(range(6))
    assert sorted(rf.get([actor.meet.remote() for _ in range(12)])) == sorted(list(range(6)) * 2)
    actor = Rendezvous.remote()
    held = [actor.hold.remote() for _ in range(5)]
    # Five calls block; the sixth slot still runs the call that releases them.
    assert rf.get(actor.open.remote(), timeout=20) == 1
    assert rf.get(held, timeout=20) == [True] * 5


def test_nested_tasks_do_not_deadlock_on_two_cpus(cluster: Any) -> None:
    @rf.remote
    def fib(n: int) -> int:
        if n < 2:
            return n
        return sum(rf.get([fib.remote(n - 1), fib.remote(n - 2)]))

    assert rf.get(fib.remote(8), timeout=60) == 21


def test_worker_crash_is_retried_then_reported(cluster: Any, tmp_path: Path) -> None:
    marker = tmp_path / "crashed-once"

    @rf.remote(max_retries=1)
    def crash_once(path: str) -> str:
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return "recovered"

    assert rf.get(crash_once.remote(str(marker)), timeout=30) == "recovered"

    @rf.remote(max_retries=0)
    def always_crash() -> None:
        os._exit(1)

    with pytest.raises(WorkerCrashedError, match=r"task [0-9a-f]{40}, worker pid \d+, node "):
        rf.get(always_crash.remote(), timeout=30)
    assert rf.get(square.remote(5)) == 25


def test_max_calls_recycles_workers(cluster: Any) -> None:
    @rf.remote(max_calls=1)
    def pid() -> int:
        return os.getpid()

    pids = {rf.get(pid.remote(), timeout=30) for _ in range(3)}
    assert len(pids) == 3
    # Tasks queued behind leaving workers wait for fresh ones: none is handed to a worker
    # that is exiting (it would be lost, and fail here, with no retries).
    queued = rf.get([pid.options(max_retries=0).remote() for _ in range(6)], timeout=60)
    assert len(set(queued)) == 6


def test_options_are_validated(cluster: Any) -> None:
    with pytest.raises(TypeError, match="invalid option 'num_cpu'"):
        rf.remote(num_cpu=1)(lambda: 1)
    with pytest.raises(ValueError):
        rf.remote(num_cpus=-1)(lambda: 1)
    with pytest.raises(TypeError, match="cannot be called directly"):
        square(3)
    with pytest.raises(TypeError, match="cannot be instantiated directly"):
        Counter()
    rf.remote(num_return_vals=2)(lambda: (1, 2))  # the classic spelling


@pytest.mark.parametrize(("node_cvd", "devices"), [(None, [0, 1]), ("5,7", [5, 7])])
def test_gpu_ids_and_cuda_visible_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node_cvd: str | None, devices: list[int]
) -> None:
    # A node started with CUDA_VISIBLE_DEVICES="5,7" has two GPUs (detected from the list),
    # and its tasks see devices of that list, not the node's instance numbers 0 and 1.
    if node_cvd is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", node_cvd)
    rf.init(
        num_cpus=2,
        num_gpus=None if node_cvd else 2,
        object_store_memory=64 << 20,
        temp_dir=str(tmp_path),
    )
    try:

        @rf.remote(num_gpus=1)
        def gpus() -> tuple[list[int | str], list[str], str, list[int]]:
            return (
                rf.get_gpu_ids(),
                rf.get_runtime_context().get_accelerator_ids()["GPU"],
                os.environ["CUDA_VISIBLE_DEVICES"],
                [i for i, _ in rf.get_resource_ids()["GPU"]],
            )

        @rf.remote(num_cpus=0)
        def no_gpu() -> tuple[list[int | str], str]:
            return rf.get_gpu_ids(), os.environ["CUDA_VISIBLE_DEVICES"]

        ids, accelerators, env, instances = rf.get(gpus.remote())
        assert len(ids) == 1 and ids[0] in devices and instances[0] in (0, 1)
        assert ids[0] == devices[instances[0]]
        assert env == str(ids[0]) and accelerators == [env]
        assert rf.get(no_gpu.remote()) == ([], "")
        assert rf.cluster_resources()["GPU"] == 2.0
    finally:
        rf.shutdown()


def test_init_twice_and_shutdown_cleans_up(tmp_path: Path) -> None:
    info = rf.init(num_cpus=1, object_store_memory=64 << 20, temp_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="twice"):
        rf.init()
    assert rf.init(ignore_reinit_error=True) == info
    socket_path = info["object_store_address"]
    assert os.path.exists(socket_path)
    rf.shutdown()
    rf.shutdown()
    assert not rf.is_initialized()
    assert not os.path.exists(socket_path)
    with pytest.raises(ValueError, match="must not be given"):
        rf.init(address="127.0.0.1:1234", num_cpus=2)


def test_local_mode_runs_serially_with_the_same_api() -> None:
    rf.init(local_mode=True)
    try:
        assert rf.get(square.remote(4)) == 16
        c = Counter.remote()
        assert rf.get([c.inc.remote(), c.inc.remote()]) == [1, 2]

        @rf.remote
        def bad() -> None:
            raise ValueError("x")

        with pytest.raises(ValueError):
            rf.get(bad.remote())
    finally:
        rf.shutdown()


def test_kill_fails_pending_and_future_calls(cluster: Any, tmp_path: Path) -> None:
    from rayfield.exceptions import ActorDiedError

    @rf.remote
    class Slow:
        def nap(self, s: float, started: str = "") -> float:
            if started:
                Path(started).touch()
            time.sleep(s)
            return s

    a = Slow.remote()
    rf.get(a.nap.remote(0))
    started = tmp_path / "started"
    running, queued = a.nap.remote(5, str(started)), a.nap.remote(0)
    wait_for(started.exists, 10, "the first call to start running")
    rf.kill(a)
    for ref in (running, queued, a.nap.remote(0)):
        with pytest.raises(ActorDiedError):
            rf.get(ref, timeout=10)


def test_actor_restarts_after_its_process_dies(cluster: Any) -> None:
    c = Counter.options(max_restarts=1).remote()
    assert rf.get(c.inc.remote(), timeout=10) == 1
    rf.kill(c, no_restart=False)

    def call() -> int | None:
        try:
            return rf.get(c.inc.remote(), timeout=10)  # type: ignore[no-any-return]
        except rf.exceptions.ActorDiedError:
            return None  # a call in flight at the kill fails

    # later calls reach the new instance
    assert wait_for(call, 20, "a call answered by the restarted actor") == 1  # a fresh one
    rf.kill(c, no_restart=False)  # no restart left now
    # the old instance may still answer a call sent just before its process dies;
    # once it is gone, every call fails
    wait_for(lambda: call() is None, 20, "the killed actor to fail its calls")
    with pytest.raises(rf.exceptions.ActorDiedError):
        rf.get(c.inc.remote(), timeout=10)


@rf.remote(max_restarts=-1)
class CrashOnce:
    def crash_once(self, marker: str) -> int:
        if not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)  # the actor's process dies while it runs this call
        return os.getpid()


def test_max_task_retries_runs_a_call_again_on_the_restarted_actor(
    cluster: Any, tmp_path: Path
) -> None:
    """A call in flight when its actor's process dies runs again on the restarted actor
    when the actor has ``max_task_retries`` left (Ray's semantics); without, it fails."""
    retried = CrashOnce.options(max_task_retries=-1).remote()
    first = rf.get(retried.crash_once.remote(str(tmp_path / "a")), timeout=60)
    assert first == rf.get(retried.crash_once.remote(str(tmp_path / "a")), timeout=30)
    handle_copy = rf.get(rf.put([retried]))[0]  # a copy of the handle keeps the setting
    assert rf.get(handle_copy.crash_once.remote(str(tmp_path / "b")), timeout=60) > 0
    plain = CrashOnce.remote()
    with pytest.raises(rf.exceptions.ActorDiedError, match="died while running this call"):
        rf.get(plain.crash_once.remote(str(tmp_path / "c")), timeout=60)


def test_cancel_queued_and_running_tasks(cluster: Any) -> None:
    from rayfield.exceptions import TaskCancelledError

    @rf.remote
    def nap(s: float) -> float:
        time.sleep(s)
        return s

    busy = [nap.remote(3) for _ in range(2)]  # both CPUs
    queued = nap.remote(0)
    wait_for(lambda: rf.state.pending_tasks()["running"] == 2, 10, "both CPUs busy")
    rf.cancel(queued)
    with pytest.raises(TaskCancelledError):
        rf.get(queued, timeout=10)
    rf.cancel(busy[0], force=True)
    with pytest.raises(TaskCancelledError):
        rf.get(busy[0], timeout=10)
    assert rf.get(busy[1], timeout=10) == 3


def test_dropping_the_original_handle_frees_the_actor(cluster: Any) -> None:
    @rf.remote(num_cpus=2)
    class Hog:
        def ping(self) -> int:
            return 1

    hog = Hog.remote()
    last = hog.ping.remote()
    del hog  # its calls still complete; then its 2 CPUs are released
    assert rf.get(last, timeout=10) == 1
    hog2 = Hog.remote()  # needs both CPUs again
    assert rf.get(hog2.ping.remote(), timeout=20) == 1


def test_infeasible_work_waits_with_a_warning(
    cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    @rf.remote(num_gpus=1, resources={"tpu": 2})
    def needs_gpu() -> int:
        return 1

    ref = needs_gpu.remote()
    wait_for(lambda: "cannot be scheduled" in caplog.text, 10, "the infeasible warning")
    assert "GPU" in caplog.text and "tpu" in caplog.text
    [pending] = rf.state.pending_tasks()["infeasible"]
    assert pending["demand"]["GPU"] == 1.0
    rf.cancel(ref)
    with pytest.raises(rf.exceptions.TaskCancelledError):
        rf.get(ref, timeout=10)


def test_objects_are_freed_when_their_last_ref_goes(cluster: Any) -> None:
    import gc

    client = rf._private.runtime.runtime.get_runtime().client

    def stored(oid: bytes) -> bool:
        return any(o["object_id"] == oid for o in client.list_objects())

    ref = rf.put(np.zeros(1 << 20))
    oid = ref.binary()
    arr = rf.get(ref)
    del ref
    gc.collect()
    assert stored(oid)  # the array still reads from the store
    del arr
    gc.collect()
    wait_for(lambda: not stored(oid), 5, "the store to free the object")
    inner = rf.put(np.ones(10))
    outer = rf.put([inner])  # the ref escapes into another object: kept for its readers
    inner_id = inner.binary()
    del inner
    gc.collect()
    assert rf.get(rf.get(outer)[0]).sum() == 10
    assert stored(inner_id)


def test_a_lost_object_raises_instead_of_hanging(cluster: Any) -> None:
    import gc

    inner = rf.put(np.zeros(40 << 20, dtype=np.uint8))
    outer = rf.put([inner])  # escaped: unpinned when dropped here, so evictable
    del inner
    gc.collect()
    hold = [rf.put(np.ones(40 << 20, dtype=np.uint8)) for _ in range(6)]  # 240 MB of 256
    with pytest.raises(rf.exceptions.ObjectLostError, match="evicted"):
        rf.get(rf.get(outer)[0], timeout=10)
    del hold
