"""Shared by the benchmark's sides: parameters, the timed loop, process-tree figures, output.

Every side (``_system_side`` for rayfield and Ray, ``_pool_side`` for the process
pool) is a script run in its own subprocess by ``bench_core.py``. This module
imports only the standard library at load time (psutil lazily) so that any
interpreter, the Ray venv included, can load it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

RESULT_MARKER = "BENCH_RESULT "  # one line per finished row or figure: {"key": ..., ...}
START_MARKER = "BENCH_START "  # printed before a row starts, so the parent can time it out
DONE_MARKER = "BENCH_DONE"  # the side finished every row it was given
MB = 1_000_000
GB = 1_000_000_000

_FULL = {
    "budget_s": 2.0,  # timed seconds per row
    "warmup_s": 0.5,  # untimed seconds of the same operation before
    "idle_s": 2.0,  # idle after init() before the memory is read
    "batch": 1000,  # refs per "async" batch (Ray's microbenchmark uses 1,000)
    "per_client": 1000,  # calls per client per repeat in the multi/1:n/n:n rows
    "put_large_bytes": 100 * 1024 * 1024 * 8,  # Ray's: np.zeros(100 Mi, int64), 839 MB
}
# --quick: shorter rows, and 84 MB puts (the size of Ray's "multi client put gigabytes").
_QUICK = {**_FULL, "budget_s": 0.5, "warmup_s": 0.2, "put_large_bytes": 10 * 1024 * 1024 * 8}


def params(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The run's parameters; ``--quick`` in ``argv`` (default ``sys.argv``) picks the short set."""
    return dict(_QUICK if "--quick" in (sys.argv if argv is None else argv) else _FULL)


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


def process_tree(idle_s: float = 0.0) -> dict[str, Any]:
    """Descendants of this process and the memory of the whole tree (this process included).

    Memory is the sum of USS (pages private to each process, from
    ``memory_full_info().uss``), or of RSS where USS cannot be read, in MB.
    """
    try:
        import psutil
    except ImportError:
        return {"error": "psutil not installed"}
    if idle_s:
        time.sleep(idle_s)
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    uss = rss = 0
    kind = "uss"
    names: list[str] = []
    for p in procs:
        try:
            rss_p = p.memory_info().rss
            try:
                uss_p = p.memory_full_info().uss
            except (psutil.AccessDenied, AttributeError):
                uss_p, kind = rss_p, "rss"
            uss += uss_p
            rss += rss_p
            if p is not me:
                names.append(" ".join(p.cmdline()[:3])[:80] or p.name())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return {
        "children": len(procs) - 1,
        "memory_mb": uss / MB,
        "rss_mb": rss / MB,
        "memory_kind": kind,
        "child_cmdlines": names,
    }


def emit(key: str, **fields: Any) -> None:
    """Print one result as a single marked JSON line for ``bench_core.py`` to pick up."""
    sys.stdout.write(RESULT_MARKER + json.dumps({"key": key, **fields}) + "\n")
    sys.stdout.flush()


def announce(key: str) -> None:
    """Tell the parent that row ``key`` starts now (its per-row timeout runs from here)."""
    sys.stdout.write(START_MARKER + key + "\n")
    sys.stdout.flush()


def run_row(key: str, body: Callable[[], dict[str, Any]]) -> None:
    """Announce ``key``, run ``body`` and emit its figures, or ``error`` if it raised."""
    announce(key)
    try:
        emit(key, **body())
    except BaseException as exc:  # the row reports it and the run goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"{type(exc).__name__}: {exc}"
        emit(key, error=text.splitlines()[0][:300], detail=text[:3000])


def selected(all_keys: Sequence[str]) -> list[str]:
    """The rows named by ``--rows a,b`` (default: all of them), in ``all_keys`` order."""
    if "--rows" in sys.argv:
        wanted = set(sys.argv[sys.argv.index("--rows") + 1].split(","))
        return [k for k in all_keys if k in wanted]
    return list(all_keys)


def flag(name: str) -> bool:
    return name in sys.argv
