"""The two 200 MB transfer rows of ``bench_cluster.py``, in rounds that alternate systems.

Usage:
    python alternate_transfers.py [--rounds N] [--calls K] [--rows get,put] [SYSTEM ...]

Each SYSTEM (default: ``rayfield ray``) gets a two-node cluster of its own, started once
(the layout of ``_cluster_side.py``: a head and a node 2 of 1 CPU and a 2 GB store each)
with a driver in a child process; ``rayfield:NAME=VALUE,...`` is rayfield with those
environment variables set for its cluster and driver (``rayfield:RAYFIELD_STORE_WARM_AHEAD=0``,
``rayfield:RAYFIELD_DATA_CHANNEL=0``; ``rayfield:PYTHONPATH=...`` runs other sources, e.g.
an export of ``main``: ``git archive main packages | tar -x -C /tmp/base``), and
``LABEL/SYSTEM`` names it LABEL in the output (``base/rayfield:PYTHONPATH=...``). Then,
round after round, every system runs K calls
of each row in turn, the order reversed every other round, so that a change in the
machine's load falls on all of them alike: on a machine others use, only such ratios and
CPU time mean much. Rows: ``get`` (200 MB made on node 2, get on the driver) and ``put``
(200 MB put on the driver, read on node 2), timed as in ``_cluster_side.py``.

Printed per system and row: the median GB/s (with the range), the CPU seconds per GB of
each process (driver, gcs, node1 = head, node2, worker1/worker2 = their workers, other)
during the timed calls, their minor page faults per call, and for ``put`` the median time
from the submit to the task's start, of its sum, and to the result's arrival. Every
process a cluster starts is marked (``XBENCH_CLUSTER``) and stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
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
import _cluster_side as cs  # noqa: E402


def _procs(marker: str) -> dict[int, tuple[float, int, str, int]]:
    """pid -> (CPU seconds, parent pid, command line, minor faults) of the driver and the
    cluster's processes."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in [*cs._marked(marker), os.getpid()]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / tick
        out[pid] = (cpu, int(fields[1]), cmd, int(fields[7]))
    return out


def _roles(procs: dict[int, tuple[float, int, str, int]]) -> dict[int, str]:
    """pid -> driver, gcs, node1 (the head: started first), node2, worker1, worker2, other."""
    nodes = sorted(
        p for p, v in procs.items() if "node_main" in v[2] or v[2].split(" ")[0].endswith("raylet")
    )
    roles = {pid: f"node{i + 1}" for i, pid in enumerate(nodes)}
    for pid, (_, _, cmd, _) in procs.items():
        if pid == os.getpid():
            roles[pid] = "driver"
        elif "gcs.server" in cmd or "gcs_server" in cmd:
            roles[pid] = "gcs"
    for pid in procs:
        if pid in roles:
            continue
        parent, hops = procs[pid][1], 0
        while parent in procs and parent not in roles and hops < 5:
            parent, hops = procs[parent][1], hops + 1
        above = roles.get(parent, "")
        agent = "Agent" in procs[pid][2]  # Ray's dashboard and runtime-env agents
        roles[pid] = f"worker{above[-1]}" if above.startswith("node") and not agent else "other"
    return roles


def _settings(system: str) -> tuple[str, str, dict[str, str]]:
    """``(label, module name, environment)`` of a SYSTEM argument."""
    head, colon, env = system.partition(":")
    label, slash, name = head.rpartition("/")
    if not slash:
        label = system
    items = (item.partition("=") for item in filter(None, env.split(",")))
    return label, name, {key: value for key, _, value in items} if colon else {}


def serve(system: str, temp_dir: Path) -> None:
    """The child: start ``system``'s cluster, then run the rows asked for on stdin."""
    _, name, env = _settings(system)
    os.environ.update(env)
    if name == "ray":
        os.environ["RAY_AUTH_MODE"] = "disabled"
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import numpy as np

    rf: Any = __import__(name)
    marker = uuid.uuid4().hex
    try:
        address = cs.start_cluster(name, temp_dir, marker)
        if name == "ray":
            rf.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False)
        else:
            rf.init(address=address, temp_dir=str(temp_dir))
        n = cs.ARRAY_BYTES // 8
        on_node2: dict[str, Any] = {"resources": {cs.NODE2: 1}}

        @rf.remote(num_returns=2, **on_node2)
        def make(seed: int) -> tuple[Any, int]:
            return np.full(n, float(seed)), os.getpid()

        @rf.remote(**on_node2)
        def total(a: Any) -> tuple[float, float, float]:
            start = time.time()
            return float(a.sum()), start, time.time()

        def once(row: str, seed: int) -> dict[str, Any]:
            phases: dict[str, float] = {}
            if row == "put":
                ref = rf.put(np.full(n, float(seed)))
                before, t0 = _procs(marker), time.time()
                s, start, end = rf.get(total.remote(ref))
                t1, after = time.time(), _procs(marker)
                if s != seed * n:
                    raise RuntimeError(f"node 2 summed {s}, not {seed * n}")
                phases = {"task_start": start - t0, "sum": end - start, "back": t1 - end}
                del ref
            else:
                big, flag = make.remote(seed)
                rf.get(flag)
                before, t0 = _procs(marker), time.time()
                a = rf.get(big)
                t1, after = time.time(), _procs(marker)
                if a[-1] != seed:
                    raise RuntimeError(f"got an array ending in {a[-1]}, not {seed}")
                del a, big
            roles = _roles(after)
            cpu: dict[str, float] = {}
            faults: dict[str, int] = {}
            for pid, (c, _, _, flt) in after.items():
                c0, _, _, f0 = before.get(pid, (0.0, 0, "", 0))
                role = roles.get(pid, "other")
                cpu[role] = cpu.get(role, 0.0) + c - c0
                faults[role] = faults.get(role, 0) + flt - f0
            return {
                "gbps": cs.ARRAY_BYTES / (t1 - t0) / 1e9,
                "cpu": cpu,
                "faults": faults,
                **phases,
            }

        once("put", 1)  # workers started, connections open
        once("get", 1)
        print(json.dumps({"ready": system}), flush=True)
        seed = 1
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "quit":
                break
            calls = []
            for _ in range(int(words[1])):
                seed += 1
                calls.append(once(words[0], seed))
            print(json.dumps({"calls": calls, "load": os.getloadavg()[0]}), flush=True)
        rf.shutdown()
    finally:
        cs.stop_cluster(name, temp_dir, marker)


def _summary(system: str, row: str, calls: list[dict[str, Any]]) -> str:
    med = statistics.median
    rates = [c["gbps"] for c in calls]
    gb = cs.ARRAY_BYTES / 1e9
    roles = sorted({r for c in calls for r in c["cpu"]})
    cpu = ", ".join(f"{r} {med(c['cpu'].get(r, 0.0) for c in calls) / gb:.2f}" for r in roles)
    total = med(sum(c["cpu"].values()) for c in calls) / gb
    faults = ", ".join(f"{r} {int(med(c['faults'].get(r, 0) for c in calls))}" for r in roles)
    line = (
        f"{system} {row}: {med(rates):.2f} GB/s (range {min(rates):.2f}-{max(rates):.2f}, "
        f"{len(rates)} calls); CPU s/GB: {cpu}; total {total:.2f}\n    minor faults per call: "
        f"{faults}"
    )
    if row == "put":
        line += "; " + ", ".join(
            f"{k} {med(c[k] for c in calls):.3f} s" for k in ("task_start", "sum", "back")
        )
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("systems", nargs="*", default=["rayfield", "ray"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="calls per system, row and round")
    parser.add_argument("--rows", default="put,get")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--temp-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, Path(args.temp_dir))
        return 0
    rows = args.rows.split(",")
    children: dict[str, subprocess.Popen[str]] = {}
    temp_dirs: list[str] = []
    results: dict[tuple[str, str], list[dict[str, Any]]] = {
        (s, r): [] for s in args.systems for r in rows
    }
    try:
        for system in args.systems:
            temp_dir = tempfile.mkdtemp(prefix="xa-", dir="/tmp")  # short: AF_UNIX paths
            temp_dirs.append(temp_dir)
            cmd = [sys.executable, __file__, "--serve", system, "--temp-dir", temp_dir]
            env = {**os.environ, **_settings(system)[2]}  # PYTHONPATH: the driver's imports too
            children[system] = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env
            )
        for system, child in children.items():
            assert child.stdout is not None
            while not (line := child.stdout.readline()).startswith('{"ready"'):
                if not line:
                    raise SystemExit(f"{system}: the cluster did not start")
        for n in range(args.rounds):
            for row in rows:
                for system in args.systems if n % 2 == 0 else args.systems[::-1]:
                    child = children[system]
                    assert child.stdin is not None and child.stdout is not None
                    child.stdin.write(f"{row} {args.calls}\n")
                    child.stdin.flush()
                    reply = json.loads(child.stdout.readline())
                    results[(system, row)] += reply["calls"]
                    rates = " ".join(f"{c['gbps']:.2f}" for c in reply["calls"])
                    label = _settings(system)[0]
                    print(f"round {n} {label} {row}: {rates} GB/s, load {reply['load']:.1f}")
    finally:
        for child in children.values():
            if child.stdin is not None and child.poll() is None:
                with contextlib.suppress(OSError):  # it died: nothing to tell it
                    child.stdin.write("quit\n")
                    child.stdin.close()
        for child in children.values():
            child.wait(timeout=180)
        for temp_dir in temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)
    for (system, row), calls in results.items():
        if calls:
            print(_summary(_settings(system)[0], row, calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
