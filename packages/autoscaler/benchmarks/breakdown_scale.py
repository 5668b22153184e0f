"""Where a ``local_process`` scale-up's time goes: the cluster of ``bench_scale.py``
(a head with 0 CPUs, 0 to 1 workers of 1 CPU, loop period 1 s), one ``num_cpus=1`` task
submitted, and the time (seconds after the submission) of each step on its way:

- ``demand at GCS``: a poll of the GCS's node records (every 20 ms, from this process)
  first shows the task's demand (it reached the head's heartbeat);
- ``decision``: the monitor logged its launch (its log's millisecond timestamps);
- ``node listed``: the provider lists the new worker (its launch began);
- ``node process``: the worker's node process was created (``/proc``, 10 ms ticks);
- ``worker process``: the worker process that ran the task was created (the node
  prestarts one worker per CPU);
- ``registered``: the GCS lists the new node alive;
- ``task starts``: the task's first line ran (it returns ``time.time()``);
- ``result``: ``get`` returned in the driver.

Nothing of Ray here; ``bench_scale.py`` compares with Ray.

    python breakdown_scale.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from bench_scale import LOOP_S, rayfield_config  # this folder's

import rayfield
from rayfield.autoscaler import commands
from rayfield.util.state import StateClient

ORDER = [
    "demand at GCS",
    "decision",
    "node listed",
    "node process",
    "worker process",
    "registered",
    "task starts",
    "result",
]


def started_at(pid: int) -> float:
    """When process ``pid`` started (Unix seconds, to a clock tick): from its start in
    ticks after boot and ``/proc/uptime`` (``psutil``'s ``create_time`` adds the boot
    time in whole seconds, up to 1 s off)."""
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def one_run(workdir: Path) -> dict[str, float]:
    """One scale-up; each step's time after the submission (seconds)."""
    cfg = rayfield_config(workdir, "breakdown")
    commands.create_or_update(cfg, update_interval_s=LOOP_S, echo=lambda _: None)
    provider = commands.provider_for(cfg)
    marks: dict[str, float] = {}
    try:
        os.environ.update(commands.cluster_env(cfg))
        rayfield.init()
        head = commands.head_node(provider)
        assert head is not None
        stop = threading.Event()

        def watch() -> None:
            with StateClient(provider.gcs_address(head), token=provider.token(head)) as c:
                while not stop.is_set():
                    rows = c.node_records()
                    now = time.time()
                    if any(r["demand"] for r in rows):
                        marks.setdefault("demand at GCS", now)
                    if sum(r["alive"] for r in rows) > 1:
                        marks.setdefault("registered", now)
                    if commands.worker_nodes(provider):
                        marks.setdefault("node listed", now)
                    stop.wait(0.02)

        @rayfield.remote(num_cpus=1)
        def first() -> tuple[float, int]:
            return time.time(), os.getpid()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(0.3)  # the watcher polls before the submission
        t0 = time.time()
        started, worker_pid = rayfield.get(first.remote(), timeout=120)
        marks["result"] = time.time()
        marks["task starts"] = started
        stop.set()
        watcher.join()
        marks["worker process"] = started_at(worker_pid)
        (worker,) = commands.worker_nodes(provider)
        (session,) = (provider.root / "nodes" / worker).glob("session_*")
        node_pid = json.loads((session / "node.json").read_text())["pid"]
        marks["node process"] = started_at(node_pid)
        for line in commands.monitor_log(provider).read_text().splitlines():
            if "launching 1 node(s) of type worker" in line:
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                marks.setdefault("decision", stamp.timestamp())
        rayfield.shutdown()
    finally:
        commands.teardown(cfg, echo=lambda _: None)
    return {k: v - t0 for k, v in marks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="breakdown-scale-") as d:
            runs.append(one_run(Path(d)))
        print(json.dumps(runs[-1]), flush=True)
    print(f"{args.repeats} run(s), medians, seconds after the submission:")
    for key in ORDER:
        values = [r[key] for r in runs if key in r]
        if values:
            low, high = min(values), max(values)
            print(f"  {key:15} {statistics.median(values):6.2f}  ({low:.2f}-{high:.2f})")


if __name__ == "__main__":
    main()
