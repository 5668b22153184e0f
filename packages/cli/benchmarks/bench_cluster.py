"""Cross-node benchmark: rayfield next to Ray, each on two nodes of this machine, in one run.

Usage:
    python bench_cluster.py [--quick] [--json OUT] [--ray-python PATH] [--row-timeout S]

For each system (rayfield, then Ray from ``--ray-python``, default this
interpreter) ``_cluster_side.py`` starts a head and a second node with the
system's own command (``rayfield start`` / ``ray start``, 1 CPU each, the second
with ``{"node2": 1000}``), connects a driver to the head and measures object
transfer between the nodes in both directions (200 MB arrays), the rate of tasks
that must be spilled to the second node (1,000 and 10,000 at a time), the rate of
calls from the driver to an actor on the second node, and a broadcast (1 GB read on
four nodes; the row starts three more). The side's process handling,
timeouts and table formatting are those of the core benchmark
(``packages/core/benchmarks/bench_core.py``), imported from there. Targets are
not asserted. See README.md for the methodology.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parents[1] / "core" / "benchmarks"))
from _cluster_side import ROWS, sweep  # noqa: E402
from bench_core import Side, busy_cpus, finish, fmt, ratio, value  # noqa: E402


def run_side(name: str, python: str, quick: bool, row_timeout_s: float) -> Side:
    """Run one system's side in a temp dir of its own; stop whatever it left running."""
    temp_dir = Path(tempfile.mkdtemp(prefix=f"xb-{name}-", dir="/tmp"))  # short: AF_UNIX
    marker = uuid.uuid4().hex
    cmd = [python, str(HERE / "_cluster_side.py"), name, "--temp-dir", str(temp_dir)]
    cmd += ["--marker", marker]
    try:
        return Side(name, cmd, [k for k, _, _ in ROWS], quick, row_timeout_s).run()
    finally:
        try:  # the side stops its cluster itself; this is for a side killed on a timeout
            subprocess.run([*cmd, "--stop"], capture_output=True, timeout=90)
        except (OSError, subprocess.TimeoutExpired):
            pass
        left = sweep(marker)
        if left:
            print(f"  {name}: {left} cluster processes would not stop", file=sys.stderr)
        shutil.rmtree(temp_dir, ignore_errors=True)


def build_rows(rf: Side, ray: Side) -> list[dict[str, Any]]:
    rows = []
    for key, label, unit in ROWS:
        a, b = value(rf, key), value(ray, key)
        r = a / b if isinstance(a, float) and isinstance(b, float) and b else None
        row = {"key": key, "benchmark": label, "unit": unit, "rayfield": a, "ray": b}
        rows.append({**row, "rf_over_ray": r})
    return rows


def cpu_cell(side: Side, key: str, unit: str) -> str:
    v = (side.results.get(key) or {}).get("cpu_us_per_op")
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v / 1e6:.2f} s/GB" if unit == "GB/s" else f"{v / 1e3:.2f} ms/task"


def print_table(rows: list[dict[str, Any]], rf: Side, ray: Side) -> None:
    header = ("benchmark", "rayfield", "ray", "rf/ray", "CPU rf", "CPU ray")
    lines = [header]
    for r in rows:
        lines.append(
            (
                r["benchmark"],
                fmt(r["rayfield"], r["unit"]),
                fmt(r["ray"], r["unit"]),
                ratio(r["rf_over_ray"]),
                cpu_cell(rf, r["key"], r["unit"]),
                cpu_cell(ray, r["key"], r["unit"]),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print()
    for n, line in enumerate(lines):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print(
        "CPU: CPU time of the driver and every cluster process (nodes, GCS, workers) "
        "during the timed calls, per GB moved or per task."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 timed repeats per row, not 5")
    parser.add_argument("--json", metavar="OUT", help="also write every figure to this JSON file")
    parser.add_argument(
        "--ray-python", metavar="PATH", default=sys.executable, help="interpreter for the Ray side"
    )
    parser.add_argument(
        "--row-timeout",
        metavar="S",
        type=float,
        default=120.0,
        help="seconds a row (cluster start included) may run before it counts as hung",
    )
    args = parser.parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    started = time.perf_counter()
    busy = busy_cpus()
    if busy is not None and busy > 0.25:
        print(
            f"warning: {busy:.1f} of {os.cpu_count()} CPUs busy before the run: noisy figures",
            file=sys.stderr,
        )
    loads = {}
    sides = {}
    for name, python in (("rayfield", sys.executable), ("ray", args.ray_python)):
        loads[name] = os.getloadavg()[0]
        sides[name] = run_side(name, python, args.quick, args.row_timeout)
    rf, ray = sides["rayfield"], sides["ray"]
    if ray.error and "not installed" in ray.error:
        ray.error = "ray not installed"

    rows = build_rows(rf, ray)
    print_table(rows, rf, ray)
    versions = {n: s.results.get("version", {}).get("value", "-") for n, s in sides.items()}
    print(
        f"rayfield {versions['rayfield']}, ray {versions['ray']}; "
        f"{'quick' if args.quick else 'full'} run, {os.cpu_count()} CPUs, load average before "
        "each side: " + ", ".join(f"{n} {v:.1f}" for n, v in loads.items())
    )
    return finish(list(sides.values()), rows, args, loads, busy, started)


if __name__ == "__main__":
    sys.exit(main())
