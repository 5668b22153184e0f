"""rayfield.util against a real local cluster: ActorPool, Queue, multiprocessing.Pool, joblib."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import rayfield as rf
from rayfield.util import ActorPool, Empty, Full, Queue
from rayfield.util.multiprocessing import Pool

# Workers cannot import this test module (they do not get the driver's sys.path), so plain
# functions from it travel by value, like functions defined in a script's __main__.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# ---- helpers that run remotely ----------------------------------------------------------


@rf.remote
class Doubler:
    def double(self, v: int) -> int:
        time.sleep(0.02 * (3 - v % 4))  # later values often finish first
        return 2 * v

    def slow(self, v: int) -> int:
        time.sleep(1.0)
        return v


@rf.remote
def produce(q: Queue, n: int) -> int:
    for i in range(n):
        q.put(i)  # blocks while the small queue is full
    return n


@rf.remote
def consume(q: Queue, n: int) -> list[int]:
    return [q.get(timeout=20) for _ in range(n)]


def square(x: int) -> int:
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def record_pid(path: str) -> None:
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")


def pid_after(x: float) -> int:
    time.sleep(x)
    return os.getpid()


# ---- ActorPool --------------------------------------------------------------------------


def test_actor_pool_map_and_map_unordered(cluster: Any) -> None:
    pool = ActorPool([Doubler.remote(), Doubler.remote()])
    values = list(range(12))
    expected = [2 * v for v in values]
    assert list(pool.map(lambda a, v: a.double.remote(v), values)) == expected
    unordered = list(pool.map_unordered(lambda a, v: a.double.remote(v), values))
    assert sorted(unordered) == expected

    for v in values[:5]:  # more values than actors: the rest wait in the pool
        pool.submit(lambda a, v: a.double.remote(v), v)
    assert not pool.has_free()
    got = []
    while pool.has_next():
        got.append(pool.get_next())
    assert got == expected[:5]
    with pytest.raises(StopIteration):
        pool.get_next()


def test_actor_pool_timeouts_and_membership(cluster: Any) -> None:
    a, b = Doubler.remote(), Doubler.remote()
    pool = ActorPool([a])
    pool.submit(lambda actor, v: actor.slow.remote(v), 7)
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.05)
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0.05)
    assert pool.get_next(timeout=10) == 7  # still there after a timeout
    assert pool.has_free()
    pool.push(b)
    with pytest.raises(ValueError, match="already belongs"):
        pool.push(b)
    popped = pool.pop_idle()
    assert popped in (a, b)
    assert pool.pop_idle() is not None
    assert pool.pop_idle() is None


# ---- Queue ------------------------------------------------------------------------------


def test_queue_fifo_limits_and_batches(cluster: Any) -> None:
    q = Queue(maxsize=3)
    assert q.empty() and not q.full() and q.qsize() == 0
    for i in range(3):
        q.put(i)
    assert q.full() and len(q) == 3 and q.size() == 3
    with pytest.raises(Full):
        q.put_nowait(3)
    with pytest.raises(Full):
        q.put(3, timeout=0.2)
    # a put with a timeout waits for room: another caller's get lets it in
    putter = threading.Thread(target=q.put, args=(9,), kwargs={"timeout": 60})
    putter.start()
    assert q.get(timeout=10) == 0
    putter.join()
    assert q.full()
    with pytest.raises(Full):
        q.put_nowait_batch([3])
    assert [q.get(), q.get_nowait()] == [1, 2]
    with pytest.raises(Empty):
        q.get_nowait_batch(2)  # only one item: none is taken
    q.put_nowait_batch([3, 4])
    assert q.get_nowait_batch(3) == [9, 3, 4]
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(timeout=0.2)
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    import queue as stdlib_queue

    assert issubclass(Empty, stdlib_queue.Empty) and issubclass(Full, stdlib_queue.Full)

    ref = rf.put("payload")  # an ObjectRef goes through as a ref, not as its value
    q.put(ref)
    assert rf.get(q.get()) == "payload"
    q.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        q.put(1)


def test_queue_between_tasks(cluster: Any) -> None:
    q = Queue(maxsize=4)  # smaller than the item count: the producer blocks on a full queue
    consumer = consume.remote(q, 20)
    producer = produce.remote(q, 20)
    assert rf.get(consumer, timeout=30) == list(range(20))
    assert rf.get(producer, timeout=30) == 20
    assert q.empty()


# ---- multiprocessing.Pool -------------------------------------------------------------


def test_pool_matches_builtins(cluster: Any, tmp_path: Path) -> None:
    pids_file = tmp_path / "init.txt"
    values = list(range(37))
    with Pool(processes=2, initializer=record_pid, initargs=(str(pids_file),)) as pool:
        assert pool.map(square, values) == list(map(square, values))
        assert pool.map(square, values, chunksize=5) == list(map(square, values))
        assert pool.map(square, []) == []
        assert list(pool.imap(square, values)) == list(map(square, values))
        assert sorted(pool.imap_unordered(square, values, chunksize=3)) == sorted(
            map(square, values)
        )
        pairs = [(2, i) for i in range(10)]
        assert pool.starmap(pow, pairs) == [pow(*p) for p in pairs]
        assert pool.starmap_async(pow, pairs).get(timeout=10) == [pow(*p) for p in pairs]
        assert pool.apply(divmod, (17, 5)) == divmod(17, 5)
        result = pool.apply_async(square, (9,))
        assert result.get(timeout=10) == 81 and result.ready() and result.successful()
        got: list[Any] = []
        done = pool.map_async(square, values, callback=got.append)
        assert done.get(timeout=10) == list(map(square, values))
        pids = {pool.apply(os.getpid) for _ in range(6)}
        pool.close()
        pool.join()
    assert got == [list(map(square, values))]  # join waited for the callback
    lines = pids_file.read_text().split()
    assert len(lines) == 2 and set(map(int, lines)) == pids  # once per process


def test_pool_errors_timeouts_and_lifecycle(cluster: Any) -> None:
    pool = Pool(processes=2)
    with pytest.raises(ValueError, match="three"):
        pool.map(fail_on_three, range(6))
    errors: list[BaseException] = []
    result = pool.map_async(fail_on_three, range(6), chunksize=1, error_callback=errors.append)
    with pytest.raises(ValueError):
        result.get(timeout=10)
    assert not result.successful()
    it = pool.imap(fail_on_three, range(5))
    assert [next(it), next(it), next(it)] == [0, 1, 2]
    with pytest.raises(ValueError):
        next(it)
    assert list(it) == [4]  # iteration goes on after a failed item, as in multiprocessing
    slow = pool.apply_async(pid_after, (1.0,))
    with pytest.raises(multiprocessing.TimeoutError):
        slow.get(timeout=0.05)
    with pytest.raises(ValueError, match="not ready"):
        slow.successful()
    slow.wait(timeout=10)
    assert slow.ready()
    with pytest.raises(ValueError, match="still running"):
        pool.join()
    pool.close()
    with pytest.raises(ValueError, match="not running"):
        pool.apply(square, (1,))
    pool.join()
    assert len(errors) == 1 and isinstance(errors[0], ValueError)
    with pytest.raises(ValueError):
        Pool(processes=0)


def test_pool_maxtasksperchild_replaces_processes(cluster: Any) -> None:
    with Pool(processes=1, maxtasksperchild=2) as pool:
        pids = [pool.apply(pid_after, (0,)) for _ in range(4)]
    assert pids[0] == pids[1] != pids[2] == pids[3]


# ---- joblib -----------------------------------------------------------------------------


def test_joblib_backend_matches_serial(cluster: Any) -> None:
    joblib = pytest.importorskip("joblib")
    from rayfield.util.joblib import register_rayfield

    register_rayfield()
    with joblib.parallel_backend("rayfield"):
        out = joblib.Parallel(n_jobs=2)(joblib.delayed(square)(i) for i in range(30))
        assert out == [square(i) for i in range(30)]
        with pytest.raises(ValueError, match="three"):
            joblib.Parallel(n_jobs=2)(joblib.delayed(fail_on_three)(i) for i in range(6))


def test_joblib_missing_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from rayfield.util import joblib as rf_joblib

    rf_joblib.backend_class.cache_clear()
    monkeypatch.setitem(sys.modules, "joblib", None)  # makes `import joblib` fail
    try:
        with pytest.raises(ImportError, match="pip install joblib"):
            rf_joblib.register_rayfield()
    finally:
        rf_joblib.backend_class.cache_clear()


def test_util_import_is_light() -> None:
    code = "import sys, rayfield.util as u; assert 'joblib' not in sys.modules; u.multiprocessing"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


@rf.remote
def node_ip_in_a_task() -> str:
    from rayfield.util import get_node_ip_address

    return get_node_ip_address()


def test_get_node_ip_address_is_the_nodes_own_once_initialized(cluster: Any) -> None:
    """As Ray's: the driver and its tasks agree on their node's address (127.0.0.1 for an
    embedded init), not on the route out to the world."""
    from rayfield.util import get_node_ip_address

    assert get_node_ip_address() == "127.0.0.1"
    assert rf.get(node_ip_in_a_task.remote()) == "127.0.0.1"
