"""Watch a local_process cluster grow for queued tasks and shrink when they are done.

Run it on a cluster brought up from ``local-process.yaml`` (no workers to begin with,
at most 2, idle timeout 30 s)::

    rayfield-autoscaler up examples/local-process.yaml -y --update-interval-s 1
    rayfield-autoscaler submit examples/local-process.yaml examples/scale_demo.py
    rayfield-autoscaler down examples/local-process.yaml -y

The script submits ``--tasks`` one-CPU tasks, one every ``--every-s`` (the head has no
CPU, so they wait for workers), prints the alive workers each second while they run and after,
and exits once the cluster is back to no worker (or fails after ``--timeout-s``).
"""

from __future__ import annotations

import argparse
import time

import rayfield
from rayfield.util import state


@rayfield.remote(num_cpus=1)
def work(seconds: float) -> str:
    time.sleep(seconds)
    return str(rayfield.get_runtime_context().get_node_id())


def workers() -> int:
    """Alive nodes with at least one CPU (the head has none)."""
    return sum(1 for n in state.list_nodes() if n["alive"] and n["resources_total"].get("CPU"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--task-s", type=float, default=4.0)
    parser.add_argument("--every-s", type=float, default=1.5)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args()
    rayfield.init()  # RAYFIELD_ADDRESS and RAYFIELD_TOKEN come from `submit`
    t0 = time.monotonic()
    # One task every --every-s: the first ones wait for a worker and go to the first
    # that joins (work forwarded to a node stays there); later ones go where CPUs are free.
    refs: list[rayfield.ObjectRef] = []
    pending = refs
    most = 0
    while len(refs) < args.tasks or pending:
        if len(refs) < args.tasks:
            refs.append(work.remote(args.task_s))
        _, pending = rayfield.wait(refs, num_returns=len(refs), timeout=args.every_s)
        most = max(most, workers())
        print(f"{time.monotonic() - t0:6.1f} s  workers {workers()}  tasks left {len(pending)}")
    nodes = sorted(set(rayfield.get(refs)))
    print(f"{args.tasks} tasks ran on {len(nodes)} node(s); at most {most} workers")
    while workers() > 0:
        if time.monotonic() - t0 > args.timeout_s:
            raise SystemExit(f"the cluster did not shrink within {args.timeout_s} s")
        print(f"{time.monotonic() - t0:6.1f} s  workers {workers()} (idle, waiting for removal)")
        time.sleep(2.0)
    print(f"{time.monotonic() - t0:6.1f} s  back to 0 workers")
    if most < 2:
        raise SystemExit(f"expected the cluster to grow to 2 workers, saw {most}")


if __name__ == "__main__":
    main()
