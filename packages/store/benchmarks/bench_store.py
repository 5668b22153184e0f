"""Object-store benchmark: rayfield.store next to Ray's object store and memcpy, in one run.

Usage:
    python bench_store.py [--quick] [--json OUT] [--ray-python PATH]

Each side runs in its own subprocess, one after the other, so that none
disturbs another and each starts clean: the memcpy baseline (``_memcpy_side``),
rayfield (``_rayfield_side``, with this interpreter), Ray (``_ray_side``, with
``--ray-python``, default this interpreter) and memcpy again. Results are
printed as one table; targets are reported, never asserted. See README.md for
the methodology.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import RESULT_MARKER  # noqa: E402

# (result key, label, unit, target): target ("ray", x) means rayfield >= x * Ray,
# ("memcpy", x) means rayfield >= x * memcpy bandwidth for the same object size.
ROWS: list[tuple[str, str, str, tuple[str, float] | None]] = [
    ("small_put", "small put, 8 B", "calls/s", ("ray", 3.0)),
    ("small_get", "small get+release, 8 B", "calls/s", ("ray", 3.0)),
    ("put_1MB_1c", "put 1 MB, 1 client", "GB/s", None),
    ("put_100MB_1c", "put 100 MB, 1 client", "GB/s", ("memcpy", 0.5)),
    ("put_1MB_2c", "put 1 MB, 2 clients", "GB/s", None),
    ("put_100MB_2c", "put 100 MB, 2 clients", "GB/s", None),
]


def run_side(name: str, python: str, script: str, quick: bool, timeout_s: float) -> dict[str, Any]:
    """Run one side's script and return its result, or ``{"error": ...}`` if it failed."""
    cmd = [python, str(HERE / script)] + (["--quick"] if quick else [])
    print(f"running {name} ({' '.join(cmd)}) ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        # A session of its own, so that a timeout also ends its client processes.
        proc = subprocess.Popen(
            cmd, stdout=PIPE, stderr=PIPE, text=True, cwd=HERE, start_new_session=True
        )
    except OSError as exc:
        return {"error": f"cannot run {python}: {exc.strerror}"}
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"error": f"timed out after {timeout_s:.0f} s"}
    print(f"  {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    tail = (stderr or stdout).strip().splitlines()[-15:]
    print(f"  {name} failed (exit {proc.returncode}):", *tail, sep="\n    ", file=sys.stderr)
    return {"error": f"failed, exit {proc.returncode}"}


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


def better_memcpy(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Per size, the memcpy run with the better best repeat (a busy moment only lowers it)."""
    if "error" in first or "error" in second:
        return second if "error" in first else first
    return {k: max(v, second[k], key=lambda r: r["best"]) for k, v in first.items()}


def value(side: dict[str, Any], key: str) -> float | None:
    """The figure a row shows: all timed work over all timed seconds (see README)."""
    entry = side.get(key)
    return None if entry is None else entry["overall"]


def fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}/s" if unit == "calls/s" else f"{x:.2f} GB/s"


def build_rows(
    memcpy: dict[str, Any], rf: dict[str, Any], ray: dict[str, Any]
) -> list[dict[str, Any]]:
    """One dict per table row, with the ratios, the target and whether it is met."""
    rows = []
    for key, label, unit, target in ROWS:
        a, b = value(rf, key), value(ray, key)
        copy = memcpy.get(f"memcpy_{key.split('_')[1]}", {}).get("best") if unit == "GB/s" else None
        row: dict[str, Any] = {
            "key": key,
            "operation": label,
            "unit": unit,
            "rayfield": a,
            "ray": b,
            "ratio": a / b if a and b else None,
            "pct_memcpy_rayfield": 100 * a / copy if a and copy else None,
            "pct_memcpy_ray": 100 * b / copy if b and copy else None,
            "target": None,
            "met": None,
        }
        if target is not None:
            peer, factor = target
            if peer == "ray":
                row["target"], got = f">= {factor:g}x ray", row["ratio"]
            else:
                row["target"], got = f">= {factor:.0%} memcpy", a / copy if a and copy else None
            row["met"] = None if got is None else got >= factor
        rows.append(row)
    return rows


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def print_table(
    rows: list[dict[str, Any]], memcpy: dict[str, Any], rf: dict[str, Any], ray: dict[str, Any]
) -> None:
    copies = ", ".join(
        f"{k.split('_')[1]} {v['best']:.2f} GB/s" for k, v in memcpy.items() if isinstance(v, dict)
    )
    print(f"\nmemcpy (np.copyto, best run): {copies or memcpy.get('error', '-')}")
    header = (
        "operation",
        "rayfield",
        "ray",
        "rf/ray",
        "% memcpy rf",
        "% memcpy ray",
        "target",
        "met",
    )
    lines = [header]
    for r in rows:
        lines.append(
            (
                r["operation"],
                fmt(r["rayfield"], r["unit"]) if "error" not in rf else rf["error"],
                fmt(r["ray"], r["unit"]) if "error" not in ray else ray["error"],
                "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                pct(r["pct_memcpy_rayfield"]),
                pct(r["pct_memcpy_ray"]),
                r["target"] or "-",
                {True: "yes", False: "NO", None: "-" if r["target"] is None else "n/a"}[r["met"]],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print(f"ray {ray.get('version', '-')}; each figure: all timed work / all timed seconds")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer repeats and calls (under a minute)"
    )
    parser.add_argument("--json", metavar="OUT", help="also write every figure to this JSON file")
    parser.add_argument(
        "--ray-python", metavar="PATH", default=sys.executable, help="interpreter for the Ray side"
    )
    args = parser.parse_args(argv)

    timeout_s = 120.0 if args.quick else 300.0
    started = time.perf_counter()
    busy = busy_cpus()
    if busy is not None and busy > 0.25:
        print(
            f"warning: {busy:.1f} of {os.cpu_count()} CPUs busy before the run: noisy figures",
            file=sys.stderr,
        )
    # memcpy before and after the stores; the better of the two is the baseline.
    before = run_side("memcpy", sys.executable, "_memcpy_side.py", args.quick, timeout_s)
    rf = run_side("rayfield", sys.executable, "_rayfield_side.py", args.quick, timeout_s)
    ray = run_side("ray", args.ray_python, "_ray_side.py", args.quick, timeout_s)
    after = run_side("memcpy", sys.executable, "_memcpy_side.py", args.quick, timeout_s)
    memcpy = better_memcpy(before, after)
    rows = build_rows(memcpy, rf, ray)
    print_table(rows, memcpy, rf, ray)
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)

    if args.json:
        report = {
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "python": sys.version.split()[0],
                "busy_cpus_before": busy,
            },
            "quick": args.quick,
            "rows": rows,
            "memcpy": memcpy,
            "memcpy_runs": [before, after],
            "rayfield": rf,
            "ray": ray,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if "error" in rf or "error" in memcpy else 0


if __name__ == "__main__":
    sys.exit(main())
