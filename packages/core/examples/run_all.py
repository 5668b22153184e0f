"""Runs the example applications on one runtime and prints a summary line per example.

Usage::

    python packages/core/examples/run_all.py                    # every example but ON_REQUEST
    python packages/core/examples/run_all.py cython_remote      # ON_REQUEST ones by name
    python packages/core/examples/run_all.py lbfgs tree_reduce  # a subset, by module name
    python packages/core/examples/run_all.py --num-workers 2 --num-cpus 2
    python packages/core/examples/run_all.py --address 127.0.0.1:6379  # on a running cluster
    python packages/core/examples/run_all.py --address 127.0.0.1:6379 --temp-dir /tmp/rf

Each example module exposes ``main(num_workers: int = 2, ...) -> dict`` returning its metrics and
an ``ok`` flag for its own sanity check (accuracy reached, reward improved, counts exact). The
runtime is started once, with ``num_cpus`` CPUs, and shut down at the end; with ``--address`` the
driver connects to a cluster started by ``rayfield start`` instead (``--temp-dir``: the one given
to ``rayfield start``, where the driver finds the cluster's token; or set ``RAYFIELD_TOKEN``). The
examples' code travels to the cluster's workers by value (``_common.ship_by_value``). Each example
takes well under a minute on 2 cores, locally or on two nodes of one CPU each.

Prints each example's own output, then one summary line per example (status, scalar metrics, wall
time). Exits 1 if any example raised or failed its check, 2 on an unknown example name.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from typing import Any

from _common import prepare_worker_environment, ship_by_value

import rayfield as rf

EXAMPLES = [
    "parameter_server_sync",
    "parameter_server_async",
    "lbfgs",
    "evolution_strategies",
    "mapreduce_wordcount",
    "tree_reduce",
    "policy_gradient",
    "torch_weights",
    "resnet",
    "a3c",
    "hyperparameter_search",
    "news_reader",
]
# Run only when named: they take long to build or to run (not part of `nox -s demo`).
ON_REQUEST = [
    "cython_remote",  # compiles its .pyx modules with Cython and the C compiler on first run
]


def summarize(metrics: dict[str, Any]) -> str:
    """``key=value`` for the scalar metrics (floats to 3 decimals), lists left out."""
    parts = []
    for key, value in metrics.items():
        if key in ("ok", "wall_s") or isinstance(value, list | tuple | dict):
            continue
        parts.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


def run(names: list[str], num_workers: int) -> list[tuple[str, bool, str, float]]:
    """Runs the named examples in order; one failure does not stop the others."""
    rows = []
    for name in names:
        print(f"==== {name}", flush=True)
        start = time.perf_counter()
        try:
            module = importlib.import_module(name)
            ship_by_value(module)
            metrics = module.main(num_workers=num_workers)
            ok, detail = bool(metrics["ok"]), summarize(metrics)
        except Exception:
            traceback.print_exc()
            ok, detail = False, "raised (traceback above)"
        rows.append((name, ok, detail, time.perf_counter() - start))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("examples", nargs="*", help=f"any of: {', '.join(EXAMPLES + ON_REQUEST)}")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument(
        "--address",
        default=None,
        help="run on the cluster at HOST:PORT (started with `rayfield start`) instead of a "
        "local one",
    )
    parser.add_argument(
        "--temp-dir",
        default=None,
        help="with --address: the --temp-dir the cluster was started with (its token is there)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.examples) - set(EXAMPLES) - set(ON_REQUEST))
    if unknown:
        parser.print_usage(sys.stderr)
        print(f"unknown example(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    names = args.examples or EXAMPLES

    prepare_worker_environment()
    if args.address:
        rf.init(address=args.address, temp_dir=args.temp_dir)
    else:
        # Worker actors hold one CPU each for their lifetime: give every worker one.
        rf.init(num_cpus=max(args.num_cpus, args.num_workers))
    try:
        rows = run(names, args.num_workers)
    finally:
        rf.shutdown()

    print("==== summary")
    for name, ok, detail, wall_s in rows:
        print(f"{'ok  ' if ok else 'FAIL'} {name:24s} {wall_s:5.1f} s  {detail}")
    return 0 if all(ok for _, ok, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
