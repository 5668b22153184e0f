"""Core microbenchmark: rayfield next to Ray and a process pool, in one run.

Usage:
    python bench_core.py [--quick] [--json OUT] [--ray-python PATH] [--row-timeout S]

The rows are those of ``ray microbenchmark`` (calls, tasks, actor calls, wait,
get of an object holding 10k refs) plus start-up figures: ``init()`` time,
processes started and idle memory of the whole process tree. Each system runs
in its own subprocess, one after the other: rayfield (``_system_side.py
rayfield``, this interpreter), Ray (``_system_side.py ray``, ``--ray-python``,
default this interpreter) and ``concurrent.futures.ProcessPoolExecutor``
(``_pool_side.py``, this interpreter). A row that raises shows ``error: ...``; a
row that runs past its timeout, or whose process dies, shows the error too, and
the side is restarted for the rows still to run. Targets are reported, never
asserted. See README.md for the methodology.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import DONE_MARKER, PROGRESS_MARKER, RESULT_MARKER, START_MARKER, perf  # noqa: E402

BENCH_ROWS: list[tuple[str, str]] = perf.ROWS

STARTUP_ROWS: list[tuple[str, str, str]] = [
    ("init_s", "init() time, import excluded", "s"),
    ("init_with_import_s", "init() time, import included", "s"),
    ("first_task_s", "init() to first task result", "s"),
    ("processes", "processes started", "count"),
    ("idle_memory_mb", "idle memory, whole tree (USS)", "MB"),
]
# (key, label, unit) of every row in table order.
TABLE_ROWS: list[tuple[str, str, str]] = STARTUP_ROWS + [
    (key, label, "GB/s" if key == "put_gigabytes" else "/s") for key, label in BENCH_ROWS
]
TASK_ROWS = {"tasks_sync", "tasks_async", "multi_tasks_async"}
ACTOR_ROWS = {
    "actor_sync",
    "actor_async",
    "actor_concurrent",
    "actor_1n_async",
    "actor_nn_async",
    "async_actor_sync",
    "async_actor_async",
}


def target(key: str) -> list[tuple[str, str, float]]:
    """The issue's targets for a row: (peer, "min"|"max", factor) on rayfield / peer."""
    if key in TASK_ROWS:
        return [("ray", "min", 3.0), ("pool", "min", 1.0)]
    if key in ACTOR_ROWS:
        return [("ray", "min", 3.0)]
    if key == "init_s":
        return [("ray", "max", 0.1)]
    if key == "idle_memory_mb":
        return [("ray", "max", 0.2)]
    return []


def describe(targets: list[tuple[str, str, float]]) -> str:
    parts = []
    for peer, kind, factor in targets:
        if kind == "min" and factor == 1.0:
            parts.append(f"> {peer}")
        else:
            parts.append(f"{'>=' if kind == 'min' else '<'} {factor:g}x {peer}")
    return ", ".join(parts) or "-"


# ---- running one side ------------------------------------------------------------------


class Side:
    """Run one system's side script, stream its results, time out rows, restart after a hang."""

    def __init__(
        self, name: str, cmd: list[str], keys: list[str], quick: bool, row_timeout_s: float
    ):
        self.name, self.cmd, self.keys, self.quick = name, cmd, keys, quick
        self.row_timeout_s = row_timeout_s
        self.startup_timeout_s = max(90.0, row_timeout_s)
        self.results: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.error: str | None = None

    def run(self) -> Side:
        t0 = time.perf_counter()
        remaining, first, finished = list(self.keys), True, False
        while True:
            finished, current = self._launch(remaining, first)
            remaining = [k for k in remaining if k not in self.results]
            if finished or not remaining or self.error:
                break
            if current is None:  # died before its first row: nothing more to try
                break
            first = False
            print(f"  {self.name}: restarting for {len(remaining)} rows", file=sys.stderr)
        if not finished and not self.error:
            for key in remaining:
                self.results.setdefault(key, {"error": "not run: its process died before"})
        print(
            f"  {self.name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True
        )
        return self

    def _launch(self, rows: list[str], first: bool) -> tuple[bool, str | None]:
        """One process of the side. Returns (reached DONE, the row running at the end)."""
        cmd = [*self.cmd, "--rows", ",".join(rows)]
        cmd += (["--quick"] if self.quick else []) + ([] if first else ["--no-startup"])
        print(f"running {self.name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        with tempfile.TemporaryFile(mode="w+") as err:
            return self._supervise(cmd, first, err)

    def _supervise(self, cmd: list[str], first: bool, err: Any) -> tuple[bool, str | None]:
        try:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=HERE, start_new_session=True
            )
        except OSError as exc:
            self.error = f"cannot run {cmd[0]}: {exc.strerror}"
            return False, None
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        tree = _Tree(proc.pid)
        current: str | None = "startup" if first else None
        row_started = time.monotonic()
        deadline = time.monotonic() + self.startup_timeout_s
        finished = False
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                what = current or "startup"
                waited = self.startup_timeout_s if what == "startup" else self.row_timeout_s
                if finished:
                    self.notes.append(f"shutdown took over {waited:.0f} s; killed")
                elif what == "startup":
                    self.error = f"error: init/start-up hung (no result after {waited:.0f} s)"
                else:
                    self.results[what] = {"error": f"timed out after {waited:.0f} s"}
                tree.kill()
                break
            tree.snapshot()
            if line is None:
                break
            if line.startswith(START_MARKER):
                current = line[len(START_MARKER) :].strip()
                row_started = time.monotonic()
                deadline = row_started + self.row_timeout_s
            elif line.startswith(RESULT_MARKER):
                result = json.loads(line[len(RESULT_MARKER) :])
                key = result.pop("key")
                if key == "import":
                    self.error = result["error"]
                    finished = True
                self.results[key] = result
                if key == current:
                    result["wall_s"] = time.monotonic() - row_started
                    current = None
                    deadline = time.monotonic() + self.row_timeout_s
            elif line.startswith(PROGRESS_MARKER) and current is not None:
                deadline = time.monotonic() + self.row_timeout_s
            elif line.startswith(DONE_MARKER):
                finished, current = True, None
                deadline = time.monotonic() + 30.0  # shutdown()
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            tree.kill()
            rc = proc.wait()
        tree.reap()
        err.seek(0)
        tail = [ln for ln in err.read().strip().splitlines() if ln.strip()][-6:]
        if rc != 0 and finished and not self.error:
            self.notes.append(f"exit {rc} after its last row (during shutdown)")
        if not finished and current is not None and current not in self.results:
            detail = f"process died (exit {rc})" + (f": {tail[-1][:200]}" if tail else "")
            if current == "startup":
                self.error = "error: " + detail
            else:
                self.results[current] = {"error": detail}
            if tail:
                self.notes.append(f"{current}: stderr tail: " + " | ".join(t[:160] for t in tail))
        return finished, current


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


class _Tree:
    """The processes a side started (its descendants, seen while it runs), to end them all."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: dict[int, Any] = {}
        try:
            import psutil

            self.root: Any = psutil.Process(pid)
        except Exception:  # psutil missing or the process already gone
            self.root = None

    def snapshot(self) -> None:
        if self.root is None:
            return
        try:
            for child in self.root.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except Exception:  # the side exited meanwhile
            pass

    def kill(self) -> None:
        """SIGKILL the side's process group and every descendant seen (same process only)."""
        self.snapshot()
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        for p in self.seen.values():
            try:
                if p.is_running():  # psutil checks the pid still names the same process
                    p.kill()
            except Exception:
                pass

    def reap(self, grace_s: float = 5.0) -> None:
        """Give the descendants ``grace_s`` to exit on their own, then terminate the rest."""
        alive = [p for p in self.seen.values() if _running(p)]
        end = time.monotonic() + grace_s
        while alive and time.monotonic() < end:
            time.sleep(0.2)
            alive = [p for p in alive if _running(p)]
        for p in alive:
            try:
                p.kill()
            except Exception:
                pass


def _running(p: Any) -> bool:
    try:
        return bool(p.is_running()) and p.status() != "zombie"
    except Exception:
        return False


# ---- the table -------------------------------------------------------------------------


def value(side: Side, key: str) -> float | str | None:
    """A row's figure for one side: a number, an error string, or None (not run)."""
    if side.error:
        return side.error
    entry = side.results.get(key)
    if entry is None:
        return None
    if "error" in entry:
        return "error: " + entry["error"]
    v = entry.get("rate", entry.get("value"))
    return float(v) if v is not None else None


def _ratio(a: float | str | None, b: float | str | None) -> float | None:
    return a / b if isinstance(a, float) and isinstance(b, float) and b else None


def build_rows(rf: Side, ray: Side, pool: Side) -> list[dict[str, Any]]:
    rows = []
    for key, label, unit in TABLE_ROWS:
        a, b, c = value(rf, key), value(ray, key), value(pool, key)
        row: dict[str, Any] = {"key": key, "benchmark": label, "unit": unit}
        row.update(rayfield=a, ray=b, pool=c)
        row["rf_over_ray"] = _ratio(a, b)
        row["rf_over_pool"] = _ratio(a, c)
        targets = target(key)
        row["target"] = describe(targets)
        met: bool | None = None
        if targets:
            checks = []
            for peer, kind, factor in targets:
                ratio = row["rf_over_ray"] if peer == "ray" else row["rf_over_pool"]
                if ratio is not None:
                    checks.append(ratio >= factor if kind == "min" else ratio < factor)
                elif peer == "ray" or not isinstance(a, float):
                    checks.append(None)  # no rayfield figure, or no Ray to compare with
            met = None if None in checks or not checks else all(checks)
        row["met"] = met
        rows.append(row)
    return rows


def fmt(x: float | str | None, unit: str, applicable: bool = True) -> str:
    if not applicable:
        return "n/a"
    if x is None:
        return "-"
    if isinstance(x, str):
        return x if len(x) <= 44 else x[:41] + "..."
    if unit == "s":
        return f"{x * 1000:,.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"
    if unit == "count":
        return f"{x:.0f}"
    if unit == "MB":
        return f"{x:,.0f} MB"
    if unit == "GB/s":
        return f"{x:.2f} GB/s"
    return f"{x:,.0f}/s" if x >= 100 else f"{x:.2f}/s"


def ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x"


def print_table(rows: list[dict[str, Any]], pool_keys: set[str]) -> None:
    header = ("benchmark", "rayfield", "ray", "process pool", "rf/ray", "rf/pool", "target", "met?")
    lines = [header]
    for r in rows:
        pool_ok = r["key"] in pool_keys
        lines.append(
            (
                r["benchmark"],
                fmt(r["rayfield"], r["unit"]),
                fmt(r["ray"], r["unit"]),
                fmt(r["pool"], r["unit"], pool_ok),
                ratio(r["rf_over_ray"]),
                ratio(r["rf_over_pool"]),
                r["target"],
                {True: "yes", False: "NO", None: "-" if r["target"] == "-" else "n/a"}[r["met"]],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print()
    for n, line in enumerate(lines):
        cells = [
            c.ljust(w) if i in (0, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))
        ]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def print_cpu_table(rf: Side, ray: Side, pool: Side) -> None:
    """CPU per operation of each side's whole process tree, and the background load per row."""
    print(
        "\nCPU per operation, whole process tree (driver + every descendant), in microseconds;"
        "\nbusy: cores used by the side's tree / by everything else on the machine meanwhile:"
    )
    header = ("benchmark", "rayfield", "ray", "process pool", "rf/ray", "busy rf", "busy ray")
    lines = [header]

    def field(side: Side, key: str, name: str) -> float | None:
        entry = side.results.get(key) or {}
        v = entry.get(name)
        return float(v) if isinstance(v, (int, float)) else None

    def busy(side: Side, key: str) -> str:
        mine, others = field(side, key, "cpu_cores_busy"), field(side, key, "others_cores_busy")
        return "-" if mine is None or others is None else f"{mine:.2f} / {others:.2f}"

    for key, label in BENCH_ROWS:
        a, b, c = (field(s, key, "cpu_us_per_op") for s in (rf, ray, pool))
        cells = ["-" if x is None else f"{x:,.0f}" for x in (a, b, c)]
        lines.append(
            (label, *cells, ratio(a / b if a and b else None), busy(rf, key), busy(ray, key))
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        print("  ".join(cells))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def busy_cpus(seconds: float = 1.0) -> float | None:
    """CPUs kept busy (steal included) by anything else during ``seconds``, from /proc/stat."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    cpus = os.cpu_count() or 1
    return cpus * (1 - (idle1 - idle0) / max(1, total1 - total0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="0.5 s per row instead of 2 s")
    parser.add_argument("--json", metavar="OUT", help="also write every figure to this JSON file")
    parser.add_argument(
        "--ray-python", metavar="PATH", default=sys.executable, help="interpreter for the Ray side"
    )
    parser.add_argument(
        "--row-timeout",
        metavar="S",
        type=float,
        default=None,
        help="seconds a row may run before it counts as hung (default 45, 90 without --quick)",
    )
    args = parser.parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    row_timeout_s = args.row_timeout or (45.0 if args.quick else 90.0)

    started = time.perf_counter()
    busy = busy_cpus()
    if busy is not None and busy > 0.25:
        print(
            f"warning: {busy:.1f} of {os.cpu_count()} CPUs busy before the run: noisy figures",
            file=sys.stderr,
        )
    keys = [k for k, _ in BENCH_ROWS]
    side = str(HERE / "_system_side.py")
    loads: dict[str, Any] = {}

    def run(name: str, cmd: list[str]) -> Side:
        load_before = os.getloadavg()
        s = Side(name, cmd, keys, args.quick, row_timeout_s).run()
        loads[name] = {"before": load_before, "after": os.getloadavg()}
        return s

    rf = run("rayfield", [sys.executable, side, "rayfield"])
    ray = run("ray", [args.ray_python, side, "ray"])
    pool = run("process pool", [sys.executable, str(HERE / "_pool_side.py")])
    if ray.error and "not installed" in ray.error:
        ray.error = "ray not installed"

    rows = build_rows(rf, ray, pool)
    from _pool_side import POOL_ROWS

    pool_keys = {k for k, _, _ in STARTUP_ROWS} | set(POOL_ROWS)
    print_table(rows, pool_keys)
    print_cpu_table(rf, ray, pool)
    versions = {s.name: s.results.get("version", {}).get("value", "-") for s in (rf, ray, pool)}
    print(
        f"rayfield {versions['rayfield']}, ray {versions['ray']}, {versions['process pool']} "
        f"({pool.results.get('start_method', {}).get('value', '?')}); "
        f"{'quick' if args.quick else 'full'} run, {os.cpu_count()} CPUs, "
        f"load average before each side: "
        + ", ".join(f"{n} {v['before'][0]:.1f}" for n, v in loads.items())
    )
    return finish([rf, ray, pool], rows, args, loads, busy, started)


def finish(
    sides: list[Side],
    rows: Any,
    args: argparse.Namespace,
    loads: dict[str, Any],
    busy: Any,
    started: float,
) -> int:
    """Print the sides' notes and errors and the total time, write the ``--json`` report;
    the exit status: 1 if rayfield's side (the first) failed. Shared with bench_cluster."""
    for s in sides:
        for note in s.notes:
            print(f"note ({s.name}): {note}")
        for key, entry in s.results.items():
            if isinstance(entry, dict) and "error" in entry and key != "import":
                print(f"error ({s.name}, {key}): {entry['error']}")
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.json:
        report = {
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "python": sys.version.split()[0],
                "busy_cpus_before": busy,
                "load_average": loads,
            },
            "quick": args.quick,
            "rows": rows,
            "sides": {
                s.name: {"error": s.error, "notes": s.notes, "results": s.results} for s in sides
            },
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    rf = sides[0]
    rf_failed = rf.error is not None or any(
        "error" in e for e in rf.results.values() if isinstance(e, dict)
    )
    return 1 if rf_failed else 0


if __name__ == "__main__":
    sys.exit(main())
