"""rayfield or Ray running the microbenchmark: ``python _system_side.py rayfield|ray [--quick]``.

Run by ``bench_core.py`` in a fresh process per system. Nothing but the
standard library is imported before the start-up figures are taken, so that
``init()`` is timed as a user's first call would be:

1. ``import <system>`` and ``init(num_cpus=2)``, timed apart ("import excluded"
   is ``init()`` alone, "import included" adds the import);
2. one task round trip ("init() to first task result", from before ``init()``);
3. an idle pause (``idle_s``), then the process tree: children of the driver,
   and the USS of the driver plus every descendant;
4. every row of ``rayfield._private.perf`` (loaded by ``_common``), each
   announced before it starts (the parent times it out) and reported when it ends.

Options: ``--quick``; ``--rows a,b`` runs only those rows; ``--no-startup``
skips steps 2-3 (used when the parent restarts a side after a hung row).
Every figure goes to stdout as one ``BENCH_RESULT {json}`` line.
"""

from __future__ import annotations

import importlib
import sys
import time

from _common import (
    DONE_MARKER,
    emit,
    flag,
    params,
    perf,
    process_tree,
    run_row,
    selected,
    timed_rate,
)

INIT_KWARGS = {
    "rayfield": {"num_cpus": 2},
    # Dashboard off and no log forwarding noise: Ray's defaults otherwise.
    "ray": {"num_cpus": 2, "include_dashboard": False},
}


def main() -> int:
    system = sys.argv[1]
    p = params()
    t0 = time.perf_counter()
    try:
        rf = importlib.import_module(system)
    except ImportError as exc:
        emit("import", error=f"{system} not installed ({exc})")
        return 0
    t1 = time.perf_counter()
    rf.init(**INIT_KWARGS[system])
    t2 = time.perf_counter()
    emit("version", value=getattr(rf, "__version__", "?"))
    if not flag("--no-startup"):
        emit("init_s", value=t2 - t1)
        emit("init_with_import_s", value=t2 - t0)

        def first() -> dict[str, float]:
            perf.first_task(rf)
            return {"value": time.perf_counter() - t1}

        run_row("first_task_s", first)
        tree = process_tree(idle_s=p["idle_s"])
        emit("processes", value=tree.get("children"), **tree)
        emit("idle_memory_mb", value=tree.get("memory_mb"), kind=tree.get("memory_kind"))
    setups = perf.build(rf, p)
    for key in selected([k for k, _ in perf.ROWS]):

        def body(key: str = key) -> dict[str, object]:
            call, work = setups[key]()
            return timed_rate(call, work, p["budget_s"], p["warmup_s"])

        run_row(key, body)
    rf.shutdown()
    sys.stdout.write(DONE_MARKER + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
