"""Cross-node benchmark: rayfield next to Ray, each on two nodes of this machine, in one run.

Usage:
    python bench_cluster.py [--quick] [--json OUT] [--ray-python PATH] [--row-timeout S]
                            [--net both|loopback|netns] [--rows A,B]

For each system (rayfield, then Ray from ``--ray-python``, default this
interpreter) ``_cluster_side.py`` starts a head and a second node with the
system's own command (``rayfield start`` / ``ray start``, 1 CPU each, the second
with ``{"node2": 1000}``), connects a driver to the head and measures object
transfer between the nodes in both directions (200 MB arrays), the rate of tasks
that must be spilled to the second node (1,000 and 10,000 at a time), the rate of
calls from the driver to an actor on the second node, and a broadcast (1 GB read on
four nodes; the row starts three more). With ``--net netns`` (and by default after
the loopback rows, where root and ``ip`` allow) the same rows run again with node 2
and the broadcast's nodes each in a network namespace of its own, joined by a veth pair
to a bridge whose address the head and the driver use (``tools/netns_bridge.py``),
labelled "(netns)". The side's process handling,
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
sys.path.insert(2, str(HERE.parents[2] / "tools"))
import netns_bridge  # noqa: E402
from _cluster_side import BROADCAST_NODES, NODE2, ROWS, sweep  # noqa: E402
from bench_core import Side, busy_cpus, finish, fmt, ratio, value  # noqa: E402


def run_side(
    name: str,
    python: str,
    quick: bool,
    row_timeout_s: float,
    extra: list[str] | None = None,
    keys: list[str] | None = None,
) -> Side:
    """Run one system's side in a temp dir of its own; stop whatever it left running.
    ``name`` is the system, or ``<system>-netns``; ``extra`` goes to the side's command."""
    system = name.split("-")[0]
    temp_dir = Path(tempfile.mkdtemp(prefix=f"xb-{system}-", dir="/tmp"))  # short: AF_UNIX
    marker = uuid.uuid4().hex
    cmd = [python, str(HERE / "_cluster_side.py"), system, "--temp-dir", str(temp_dir)]
    cmd += ["--marker", marker, "--row-timeout", str(row_timeout_s), *(extra or [])]
    try:
        return Side(name, cmd, keys or [k for k, _, _ in ROWS], quick, row_timeout_s).run()
    finally:
        try:  # the side stops its cluster itself; this is for a side killed on a timeout
            subprocess.run([*cmd, "--stop"], capture_output=True, timeout=90)
        except (OSError, subprocess.TimeoutExpired):
            pass
        left = sweep(marker)
        if left:
            print(f"  {name}: {left} cluster processes would not stop", file=sys.stderr)
        shutil.rmtree(temp_dir, ignore_errors=True)


def run_netns_sides(
    args: argparse.Namespace, loads: dict[str, float], sides: dict[str, Side]
) -> dict[str, Any]:
    """Both systems with node 2 (and the broadcast's nodes 3-5) each in a network
    namespace of its own, joined by veth pairs to a bridge whose address the head and the
    driver use (``tools/netns_bridge.py``; deleted afterwards whatever happens). What the
    bridge carried during each side, by side name, and the addresses used."""
    out: dict[str, Any] = {}
    nodes = (NODE2, *BROADCAST_NODES)
    with netns_bridge.bridged_namespaces(len(nodes), prefix="xbench") as net:
        hosts = ",".join(f"{n}={ns.name}@{ns.ip}" for n, ns in zip(nodes, net.namespaces))
        extra = ["--head-ip", net.bridge_ip, "--netns", hosts]
        given = {n: h.ip for n, h in zip(nodes, net.namespaces, strict=True)}
        out["addresses"] = {"head": net.bridge_ip, **given}
        for system, python in (("rayfield", sys.executable), ("ray", args.ray_python)):
            name = f"{system}-netns"
            loads[name] = os.getloadavg()[0]
            before = net.bytes_through()
            sides[name] = run_side(name, python, args.quick, args.row_timeout, extra, args.keys)
            out[f"{name}_bridge_bytes"] = net.bytes_through() - before
    return out


def build_rows(rf: Side, ray: Side, net: str, keys: list[str] | None) -> list[dict[str, Any]]:
    rows = []
    for key, label, unit in ROWS:
        if keys is not None and key not in keys:
            continue
        a, b = value(rf, key), value(ray, key)
        r = a / b if isinstance(a, float) and isinstance(b, float) and b else None
        label = label if net == "loopback" else f"{label} ({net})"
        row = {"key": key, "net": net, "benchmark": label, "unit": unit}
        rows.append({**row, "rayfield": a, "ray": b, "rf_over_ray": r})
    return rows


def cpu_cell(side: Side, key: str, unit: str) -> str:
    v = (side.results.get(key) or {}).get("cpu_us_per_op")
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v / 1e6:.2f} s/GB" if unit == "GB/s" else f"{v / 1e3:.2f} ms/task"


def side_names(net: str) -> tuple[str, str]:
    return ("rayfield", "ray") if net == "loopback" else (f"rayfield-{net}", f"ray-{net}")


def print_table(rows: list[dict[str, Any]], sides: dict[str, Side]) -> None:
    header = ("benchmark", "rayfield", "ray", "rf/ray", "CPU rf", "CPU ray")
    lines = [header]
    for r in rows:
        rf, ray = (sides[n] for n in side_names(r["net"]))
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


def print_broadcast(sides: dict[str, Side]) -> None:
    """Per side, the largest private memory (RssAnon) of any cluster process during the
    broadcast row, and which process it was (each node's store holds 2 GB, shared)."""
    cells = []
    for name, side in sides.items():
        got = side.results.get("broadcast_gbps") or {}
        if "peak_private_mb" in got:
            who = got.get("peak_private_process", "?")
            cells.append(
                f"{name} {got['peak_private_mb']:,.0f} MB ({who}; "
                f"{got.get('repeats', '?')} timed calls)"
            )
    if cells:
        print(
            "broadcast, largest private memory of a cluster process (and how many timed "
            "calls fitted in the row's time): " + "; ".join(cells)
        )


def print_netns(info: dict[str, Any], sides: dict[str, Side]) -> None:
    """The netns rows' setup: the addresses given, those the nodes advertised, what the
    bridge carried during each side."""
    if not info:
        return
    given = ", ".join(f"{k} {v}" for k, v in info["addresses"].items())
    print(f"netns: head and driver on the bridge, nodes in namespaces: {given}")
    for name in side_names("netns"):
        side = sides.get(name)
        if side is None:
            continue
        seen = {}
        for key in ("cluster_start_s", "broadcast_nodes_s", "broadcast_gbps"):
            seen.update((side.results.get(key) or {}).get("node_addresses") or {})
        moved = info.get(f"{name}_bridge_bytes", 0) / 1e9
        adv = ", ".join(f"{k} {v}" for k, v in sorted(seen.items())) or "-"
        print(f"  {name}: nodes advertised {adv}; {moved:.1f} GB through the bridge")


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
    parser.add_argument(
        "--net",
        choices=("both", "loopback", "netns"),
        default="both",
        help="loopback: every node on 127.0.0.1; netns: node 2 (and the broadcast's nodes) "
        "in network namespaces joined by veth pairs to a bridge (needs root and `ip`); "
        "both (default): loopback, then netns where it can be made",
    )
    parser.add_argument(
        "--rows",
        metavar="A,B",
        help="only these rows (keys as in the JSON, e.g. broadcast_nodes_s,broadcast_gbps); "
        "the cluster start always runs",
    )
    args = parser.parse_args(argv)
    args.keys = None
    if args.rows:
        wanted = set(args.rows.split(","))
        unknown = wanted - {k for k, _, _ in ROWS}
        if unknown:
            parser.error(f"--rows: no row {', '.join(sorted(unknown))}")
        args.keys = [k for k, _, _ in ROWS if k in wanted or k == "cluster_start_s"]
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    started = time.perf_counter()
    busy = busy_cpus()
    if busy is not None and busy > 0.25:
        print(
            f"warning: {busy:.1f} of {os.cpu_count()} CPUs busy before the run: noisy figures",
            file=sys.stderr,
        )
    nets = ["loopback", "netns"] if args.net == "both" else [args.net]
    skipped = netns_bridge.available() if "netns" in nets else None
    if skipped:
        if args.net == "netns":
            parser.error(f"--net netns: {skipped}")
        nets.remove("netns")
    loads: dict[str, float] = {}
    sides: dict[str, Side] = {}
    netns_info: dict[str, Any] = {}
    if "loopback" in nets:
        for name, python in (("rayfield", sys.executable), ("ray", args.ray_python)):
            loads[name] = os.getloadavg()[0]
            sides[name] = run_side(name, python, args.quick, args.row_timeout, None, args.keys)
    if "netns" in nets:
        netns_info = run_netns_sides(args, loads, sides)
    for side in sides.values():
        if side.error and "not installed" in side.error:
            side.error = "ray not installed"

    rows = []
    for net in nets:
        rows += build_rows(*(sides[n] for n in side_names(net)), net, args.keys)
    print_table(rows, sides)
    print_broadcast(sides)
    print_netns(netns_info, sides)
    if skipped:
        print(f"netns rows not run: {skipped}")
    versions: dict[str, Any] = {}
    for name, side in sides.items():
        versions.setdefault(name.split("-")[0], side.results.get("version", {}).get("value", "-"))
    print(
        ", ".join(f"{n} {v}" for n, v in versions.items())
        + f"; {'quick' if args.quick else 'full'} run, {os.cpu_count()} CPUs, load average "
        "before each side: " + ", ".join(f"{n} {v:.1f}" for n, v in loads.items())
    )
    status = finish(list(sides.values()), rows, args, loads, busy, started)
    rf_netns = sides.get("rayfield-netns")
    if rf_netns is not None and (
        rf_netns.error or any("error" in e for e in rf_netns.results.values())
    ):
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
