"""``concurrent.futures.ProcessPoolExecutor`` doing the rows that have a pool equivalent.

Run by ``bench_core.py`` in its own process: ``python _pool_side.py [--quick]``.
The pool has 2 workers (as the other systems have ``num_cpus=2``) and the
platform's default start method (recorded as ``start_method``). "init()" is
``ProcessPoolExecutor(max_workers=2)``, which starts no process yet; "init() to
first task result" includes starting the workers.

Rows: a task is ``pool.submit(small_value)`` and its ``result()``; "sync" waits
for each, "async" submits a batch and then waits for all; "multi client" has 2
driver threads each submitting its own batch; "wait 1k refs" submits 1,000 and
then calls ``concurrent.futures.wait(..., FIRST_COMPLETED)`` 1,000 times, taking
one finished future out each time, as ``wait(not_ready)`` with ``num_returns=1``
does. Puts, gets and actors have no pool equivalent and are not run ("n/a").
"""

from __future__ import annotations

import sys
import time

from _common import DONE_MARKER, emit, flag, params, process_tree, run_row, selected, timed_rate

POOL_ROWS = ["tasks_sync", "tasks_async", "multi_tasks_async", "wait_1k"]
N_CLIENTS = 2  # as rayfield._private.perf.N_CLIENTS


def small_value() -> bytes:
    return b"ok"


def main() -> int:
    p = params()
    batch, per_client = p["batch"], p["per_client"]
    t0 = time.perf_counter()
    import concurrent.futures as cf
    import multiprocessing

    t1 = time.perf_counter()
    pool = cf.ProcessPoolExecutor(max_workers=2)
    t2 = time.perf_counter()
    emit("version", value=f"python {sys.version.split()[0]}")
    emit("start_method", value=multiprocessing.get_start_method())
    if not flag("--no-startup"):
        emit("init_s", value=t2 - t1)
        emit("init_with_import_s", value=t2 - t0)

        def first() -> dict[str, float]:
            pool.submit(small_value).result()
            return {"value": time.perf_counter() - t1}

        run_row("first_task_s", first)
        tree = process_tree(idle_s=p["idle_s"])
        emit("processes", value=tree.get("children"), **tree)
        emit("idle_memory_mb", value=tree.get("memory_mb"), kind=tree.get("memory_kind"))

    def tasks_sync() -> None:
        pool.submit(small_value).result()

    def submit_batch(n: int) -> None:
        for f in [pool.submit(small_value) for _ in range(n)]:
            f.result()

    drivers = cf.ThreadPoolExecutor(max_workers=N_CLIENTS)

    def multi_tasks_async() -> None:
        for f in [drivers.submit(submit_batch, per_client) for _ in range(N_CLIENTS)]:
            f.result()

    def wait_1k() -> None:
        not_ready = {pool.submit(small_value) for _ in range(1000)}
        for _ in range(1000):
            done, not_done = cf.wait(not_ready, return_when=cf.FIRST_COMPLETED)
            done.pop()
            not_ready = not_done | done

    rows = {
        "tasks_sync": (tasks_sync, 1),
        "tasks_async": (lambda: submit_batch(batch), batch),
        "multi_tasks_async": (multi_tasks_async, per_client * N_CLIENTS),
        "wait_1k": (wait_1k, 1),
    }
    for key in selected(POOL_ROWS):
        call, work = rows[key]
        run_row(key, lambda c=call, w=work: timed_rate(c, w, p["budget_s"], p["warmup_s"]))
    drivers.shutdown()
    pool.shutdown()
    sys.stdout.write(DONE_MARKER + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
