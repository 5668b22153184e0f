"""The microbenchmark rows of ``ray microbenchmark``, written once for rayfield and Ray.

Used by ``rayfield microbenchmark`` (rayfield-cli) and by the benchmark scripts of
``packages/core/benchmarks`` (which also run it against Ray). This module imports only
the standard library at load time (psutil and numpy lazily), so the benchmark sides can
load it by file path into any interpreter, Ray's included, without importing rayfield.

:func:`build` takes the system's module (``rayfield`` or ``ray``: the two APIs
match) and returns, per row, a *setup* function. Setup does the untimed work
(defining remote functions, creating and warming actors, creating objects) and
returns ``(call, work_per_call)``; :func:`timed_rate` calls ``call()`` repeatedly and
counts ``work_per_call`` units (calls, refs or bytes) per call.

The remote functions and actor classes are defined inside :func:`build`, so both
systems ship them to their workers by value (cloudpickle); no worker needs to import
this module. They follow ``ray/_private/ray_perf.py`` (Ray 2.x): an ``Actor`` with
``num_cpus=0``, an ``AsyncActor``, a ``Client`` actor that calls servers,
``small_value`` returning ``b"ok"``.

Example:
    >>> import rayfield, rayfield._private.perf as perf
    >>> rayfield.init(num_cpus=2)
    >>> setups = perf.build(rayfield, perf.QUICK_PARAMS)
    >>> call, work = setups["tasks_sync"]()
    >>> perf.timed_rate(call, work, budget_s=0.5, warmup_s=0.1)["rate"]  # tasks per second
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

# (key, label): the rows, in the order they run, with the names of Ray's microbenchmark.
ROWS: list[tuple[str, str]] = [
    ("get_calls", "single client get calls"),
    ("put_calls", "single client put calls"),
    ("put_gigabytes", "single client put gigabytes"),
    ("tasks_sync", "single client tasks sync"),
    ("tasks_async", "single client tasks async"),
    ("multi_tasks_async", "multi client tasks async"),
    ("actor_sync", "1:1 actor calls sync"),
    ("actor_async", "1:1 actor calls async"),
    ("actor_concurrent", "1:1 actor calls concurrent"),
    ("actor_1n_async", "1:n actor calls async"),
    ("actor_nn_async", "n:n actor calls async"),
    ("async_actor_sync", "1:1 async-actor calls sync"),
    ("async_actor_async", "1:1 async-actor calls async"),
    ("wait_1k", "single client wait 1k refs"),
    ("get_10k_refs", "single client get object containing 10k refs"),
]

# The short run of ``rayfield microbenchmark``: single-client puts and gets, tasks and
# actor calls (sync, async, concurrent).
QUICK_ROWS: list[str] = [
    "get_calls",
    "put_calls",
    "put_gigabytes",
    "tasks_sync",
    "tasks_async",
    "actor_sync",
    "actor_async",
    "actor_concurrent",
]
UNITS = {"put_gigabytes": "GB/s"}  # every other row counts operations per second

FULL_PARAMS: dict[str, Any] = {
    "budget_s": 2.0,  # timed seconds per row
    "warmup_s": 0.5,  # untimed seconds of the same operation before
    "idle_s": 2.0,  # idle after init() before the memory is read (benchmark scripts)
    "batch": 1000,  # refs per "async" batch (Ray's microbenchmark uses 1,000)
    "per_client": 1000,  # calls per client per repeat in the multi/1:n/n:n rows
    "put_large_bytes": 100 * 1024 * 1024 * 8,  # Ray's: np.zeros(100 Mi, int64), 839 MB
}
# Shorter rows, and 84 MB puts (the size of Ray's "multi client put gigabytes").
QUICK_PARAMS: dict[str, Any] = {
    **FULL_PARAMS,
    "budget_s": 0.5,
    "warmup_s": 0.2,
    "put_large_bytes": 10 * 1024 * 1024 * 8,
}

N_CLIENTS = 2  # submitters in the multi-client rows, clients in n:n
N_SERVERS = 2  # actors called in the 1:n and n:n rows (Ray: cpu_count // 2, 1 here)

Setup = Callable[[], tuple[Callable[[], Any], float]]


def build(rf: Any, p: dict[str, Any]) -> dict[str, Setup]:
    """Per row key, the setup function for ``rf`` (``rayfield`` or ``ray``) and params ``p``."""
    batch, per_client = p["batch"], p["per_client"]

    @rf.remote
    def small_value() -> bytes:
        return b"ok"

    # The same function under another name, called only from actors. rayfield at commit
    # 8a4a9ae cannot ship a RemoteFunction the driver has already called (it caches its
    # runtime, and pickling fails with "cannot pickle 'StoreClient' object"), so an actor
    # class with `small_value` in its closure fails once the driver has run `small_value`.
    @rf.remote
    def nested_small_value() -> bytes:
        return b"ok"

    @rf.remote
    def create_object_containing_ref() -> list[Any]:
        return [rf.put(1) for _ in range(10_000)]

    @rf.remote(num_cpus=0)
    class Actor:
        def small_value(self) -> bytes:
            return b"ok"

        def small_value_batch(self, n: int) -> None:
            rf.get([nested_small_value.remote() for _ in range(n)])

    @rf.remote
    class AsyncActor:
        async def small_value(self) -> bytes:
            return b"ok"

    @rf.remote(num_cpus=0)
    class Client:
        def __init__(self, servers: list[Any]) -> None:
            self.servers = servers

        def small_value_batch(self, n: int) -> None:
            refs = []
            for s in self.servers:
                refs.extend([s.small_value.remote() for _ in range(n)])
            rf.get(refs)

    @rf.remote
    def work(servers: list[Any], n: int) -> None:
        rf.get([servers[i % len(servers)].small_value.remote() for i in range(n)])

    def ready(*handles: Any) -> None:
        """Wait until each actor answers one call (creation is outside the timed loop)."""
        rf.get([h.small_value.remote() for h in handles])

    pool: list[Any] = []  # Actors shared by the rows, kept for the whole run
    async_pool: list[Any] = []  # the one AsyncActor of both async-actor rows

    def actors(n: int) -> list[Any]:
        """``n`` started ``Actor``s, created on first use and reused by later rows."""
        while len(pool) < n:
            pool.append(Actor.remote())  # type: ignore[attr-defined]
        ready(*pool[:n])
        return pool[:n]

    def get_calls() -> tuple[Callable[[], Any], float]:
        value = rf.put(0)
        return (lambda: rf.get(value)), 1

    def put_calls() -> tuple[Callable[[], Any], float]:
        return (lambda: rf.put(0)), 1

    def put_gigabytes() -> tuple[Callable[[], Any], float]:
        import numpy as np

        arr = np.zeros(p["put_large_bytes"] // 8, dtype=np.int64)
        return (lambda: rf.put(arr)), arr.nbytes / 1e9

    def tasks_sync() -> tuple[Callable[[], Any], float]:
        return (lambda: rf.get(small_value.remote())), 1

    def tasks_async() -> tuple[Callable[[], Any], float]:
        return (lambda: rf.get([small_value.remote() for _ in range(batch)])), batch

    def multi_tasks_async() -> tuple[Callable[[], Any], float]:
        submitters = actors(N_CLIENTS)

        def call() -> None:
            rf.get([a.small_value_batch.remote(per_client) for a in submitters])

        return call, per_client * N_CLIENTS

    def actor_sync() -> tuple[Callable[[], Any], float]:
        [a] = actors(1)
        return (lambda: rf.get(a.small_value.remote())), 1

    def actor_async() -> tuple[Callable[[], Any], float]:
        [a] = actors(1)
        return (lambda: rf.get([a.small_value.remote() for _ in range(batch)])), batch

    def actor_concurrent() -> tuple[Callable[[], Any], float]:
        a = Actor.options(max_concurrency=16).remote()  # type: ignore[attr-defined]
        ready(a)
        return (lambda: rf.get([a.small_value.remote() for _ in range(batch)])), batch

    def actor_1n_async() -> tuple[Callable[[], Any], float]:
        servers = actors(N_SERVERS)
        client = Client.remote(servers)  # type: ignore[attr-defined]
        rf.get(client.small_value_batch.remote(1))

        # `servers` stay referenced (by `pool`), as in Ray's script: rayfield (working tree
        # of 2026-11-23) ends an actor when the driver's handle is collected even while
        # another actor holds a copy of it.
        return (lambda: rf.get(client.small_value_batch.remote(per_client))), (
            per_client * N_SERVERS
        )

    def actor_nn_async() -> tuple[Callable[[], Any], float]:
        servers = actors(N_SERVERS)

        def call() -> None:
            rf.get([work.remote(servers, per_client) for _ in range(N_CLIENTS)])

        return call, per_client * N_CLIENTS

    def async_actor() -> Any:
        if not async_pool:
            async_pool.append(AsyncActor.remote())  # type: ignore[attr-defined]
        ready(async_pool[0])
        return async_pool[0]

    def async_actor_sync() -> tuple[Callable[[], Any], float]:
        a = async_actor()
        return (lambda: rf.get(a.small_value.remote())), 1

    def async_actor_async() -> tuple[Callable[[], Any], float]:
        a = async_actor()
        return (lambda: rf.get([a.small_value.remote() for _ in range(batch)])), batch

    def wait_1k() -> tuple[Callable[[], Any], float]:
        def call() -> None:
            not_ready = [small_value.remote() for _ in range(1000)]
            for _ in range(1000):
                _ready, not_ready = rf.wait(not_ready)

        return call, 1

    def get_10k_refs() -> tuple[Callable[[], Any], float]:
        obj = create_object_containing_ref.remote()
        rf.get(obj)
        return (lambda: rf.get(obj)), 1

    return {
        "get_calls": get_calls,
        "put_calls": put_calls,
        "put_gigabytes": put_gigabytes,
        "tasks_sync": tasks_sync,
        "tasks_async": tasks_async,
        "multi_tasks_async": multi_tasks_async,
        "actor_sync": actor_sync,
        "actor_async": actor_async,
        "actor_concurrent": actor_concurrent,
        "actor_1n_async": actor_1n_async,
        "actor_nn_async": actor_nn_async,
        "async_actor_sync": async_actor_sync,
        "async_actor_async": async_actor_async,
        "wait_1k": wait_1k,
        "get_10k_refs": get_10k_refs,
    }


def first_task(rf: Any) -> None:
    """One task round trip: what "init() to first task result" times after init()."""

    @rf.remote
    def one() -> int:
        return 1

    rf.get(one.remote())


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (not idle or iowait) so far, all CPUs."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s() -> dict[int, float]:
    """CPU seconds (user + system) used so far by this process and each descendant, by pid."""
    try:
        import psutil
    except ImportError:
        return {}
    me = psutil.Process()
    out: dict[int, float] = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return out


def timed_rate(
    fn: Callable[[], Any], work_per_call: float, budget_s: float, warmup_s: float
) -> dict[str, Any]:
    """Call ``fn`` for ``warmup_s`` untimed, then for ``budget_s`` timed (at least once each).

    Returns:
        ``rate``: ``work_per_call`` times the timed calls over the timed seconds;
        ``calls``, ``seconds``, ``best_call_s`` and ``worst_call_s``; ``cpu_us_per_op``:
        CPU time of the whole process tree (driver and every descendant) during the
        timed calls over the work done, in microseconds, which background load on the
        machine changes much less than the rate; ``cpu_cores_busy``: that CPU time over
        the timed seconds; ``others_cores_busy``: the same for everything else on the
        machine (background load while the row ran).
    """
    t0 = time.perf_counter()
    while True:
        fn()
        if time.perf_counter() - t0 >= warmup_s:
            break
    calls = 0
    best, worst = float("inf"), 0.0
    cpu0, machine0 = tree_cpu_s(), machine_busy_s()
    start = last = time.perf_counter()
    while True:
        fn()
        now = time.perf_counter()
        calls += 1
        best, worst = min(best, now - last), max(worst, now - last)
        last = now
        if now - start >= budget_s:
            break
    seconds = last - start
    cpu1, machine1 = tree_cpu_s(), machine_busy_s()
    cpu_s = sum(t - cpu0.get(pid, 0.0) for pid, t in cpu1.items())
    others = max(0.0, machine1 - machine0 - cpu_s) / seconds if cpu1 else None
    return {
        "rate": work_per_call * calls / seconds,
        "cpu_us_per_op": 1e6 * cpu_s / (work_per_call * calls) if cpu1 else None,
        "cpu_cores_busy": cpu_s / seconds if cpu1 else None,
        "others_cores_busy": others,
        "calls": calls,
        "seconds": seconds,
        "best_call_s": best,
        "worst_call_s": worst,
    }
