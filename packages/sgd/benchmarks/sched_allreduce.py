"""Where an all-reduce's time goes: CPU, run-queue wait and context switches per call.

Times ``--reps`` all-reduces of each size, in ``--rounds`` rounds that alternate between
the raw gloo pair of ``bench_sgd.py`` (``RawGloo``, both ranks in this process's session,
as rayfield's workers are in their node's) and ``DistributedSGD(strategy="simple")``'s
own all-reduce (``SGDWorker.time_allreduce``). Around every column's turn it reads, for
all threads of both ranks, ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on a CPU,
nanoseconds runnable but waiting for one, times scheduled) and the context switches of
``/proc/<pid>/task/<tid>/status``. Per call it prints the median time and the sums over
both ranks: a column that spends more CPU than raw does work of its own; one that waits
longer in the run queue loses the CPU to other tasks. Linux only (needs schedstat).

    python sched_allreduce.py [--sizes-mb 1,4] [--rounds 20] [--reps 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import bench_sgd

import rayfield
from rayfield.sgd import DistributedSGD

MB = 1 << 20
FIELDS = ("cpu_ms", "wait_ms", "slices", "vcsw", "ivcsw")


def _counters(pids: list[int]) -> dict[str, float]:
    """Summed over every thread of ``pids``: CPU and run-queue wait (ms), times
    scheduled, voluntary and involuntary context switches."""
    out = dict.fromkeys(FIELDS, 0.0)
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                cpu, wait, slices = (Path(task, "schedstat").read_text().split())[:3]
                status = Path(task, "status").read_text().splitlines()
            except OSError:  # the thread ended between listing and reading
                continue
            out["cpu_ms"] += int(cpu) / 1e6
            out["wait_ms"] += int(wait) / 1e6
            out["slices"] += int(slices)
            for line in status:
                if line.startswith("voluntary_ctxt_switches"):
                    out["vcsw"] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    out["ivcsw"] += int(line.split()[1])
    return out


def measure(size: int, raw: bench_sgd.RawGloo, sgd: DistributedSGD, rounds: int, reps: int) -> None:
    """Print the per-call table of one size: raw against DSGD, alternating by round."""
    columns: dict[str, tuple[list[int], Callable[[], list[float]]]] = {
        "raw": ([p.pid for p in raw.procs if p.pid is not None], lambda: raw.time(size, reps)),
        "DSGD": (
            sgd.foreach_worker(lambda w: w.get_pid()),
            lambda: sgd.foreach_worker(lambda w: w.time_allreduce(reps))[0],
        ),
        "plain": (  # the raw pair's code, in DistributedSGD's workers
            sgd.foreach_worker(lambda w: w.get_pid()),
            lambda: sgd.foreach_worker(lambda w: bench_sgd._time_allreduce(size, reps))[0],
        ),
    }
    seconds: dict[str, list[float]] = {n: [] for n in columns}
    per_call: dict[str, dict[str, list[float]]] = {n: {f: [] for f in FIELDS} for n in columns}
    for r in range(rounds):
        turn = r % len(columns)
        for name in list(columns)[turn:] + list(columns)[:turn]:
            pids, timed = columns[name]
            before = _counters(pids)
            seconds[name].append(statistics.median(timed()))
            after = _counters(pids)
            for f in FIELDS:
                per_call[name][f].append((after[f] - before[f]) / reps)
    print(
        f"\n{size // MB} MB, {rounds} rounds of {reps} calls, per call (medians over rounds;"
        " counters summed over both ranks' threads, barriers and timing calls included)"
    )
    print(f"{'column':>6} {'ms':>7} {'GB/s':>6} " + " ".join(f"{f:>8}" for f in FIELDS))
    for name in columns:
        ms = statistics.median(seconds[name]) * 1e3
        cells = " ".join(f"{statistics.median(per_call[name][f]):8.2f}" for f in FIELDS)
        print(f"{name:>6} {ms:7.2f} {size / ms / 1e6:6.2f} {cells}")
    for name in list(columns)[1:]:
        ratio = statistics.median(r / c for r, c in zip(seconds["raw"], seconds[name]))
        print(f"{name}/raw bandwidth, median over rounds: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="1,4")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; load average {os.getloadavg()[0]:.1f}")
    rayfield.init(num_cpus=4, object_store_memory=1 << 30)
    raw = bench_sgd.RawGloo()
    try:
        for size in (int(s) * MB for s in args.sizes_mb.split(",")):
            sgd = bench_sgd._free_loss_sgd(size, "simple", "auto")
            try:
                measure(size, raw, sgd, args.rounds, args.reps)
            finally:
                sgd.shutdown()
    finally:
        raw.close()
        rayfield.shutdown()
    print(f"load average at the end {os.getloadavg()[0]:.1f}; {time.strftime('%H:%M')}")


if __name__ == "__main__":
    main()
