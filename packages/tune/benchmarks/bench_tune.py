"""Tune overhead next to Ray Tune and Optuna, on this machine, in one run.

Usage::

    python bench_tune.py [--trials 200] [--reports 10] [--num-cpus 2] [--json OUT]

Workload: ``--trials`` trials of a trivial function trainable that reports ``--reports``
times (no work between reports), so the time is the framework's own overhead. Each
system runs in its own process (a fresh runtime):

* rayfield-tune: ``tune.run`` on ``rayfield.init(num_cpus=N)``, actors reused (default);
* Ray Tune: ``ray.tune.run`` on ``ray.init(num_cpus=N)`` with ``reuse_actors=True``
  (skipped with a note when ``ray[tune]`` is not installed);
* Optuna: an in-process study of the same number of trials (no processes at all).

Prints one row per system (wall seconds, per-trial and per-result milliseconds) and the
ratio to rayfield-tune. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any


def side_rayfield(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    import rayfield
    from rayfield import tune

    rayfield.init(num_cpus=cpus, configure_logging=False)
    try:

        def trivial(config: dict[str, Any]) -> None:
            for i in range(reports):
                tune.report(score=i * config["x"])

        start = time.perf_counter()
        analysis = tune.run(
            trivial,
            config={"x": tune.uniform(0, 1)},
            num_samples=trials,
            storage_path=tempfile.mkdtemp(prefix="bench-rf-"),
            verbose=0,
        )
        wall = time.perf_counter() - start
        done = sum(1 for t in analysis if t.last_result.get("training_iteration") == reports)
        return {"wall_s": wall, "complete_trials": done}
    finally:
        rayfield.shutdown()


def side_ray(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    try:
        import ray
        from ray import tune
    except ImportError as exc:
        return {"skipped": f"ray[tune] not installed ({exc.name})"}
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR")
    try:

        def trivial(config: dict[str, Any]) -> None:
            for i in range(reports):
                tune.report({"score": i * config["x"]})

        start = time.perf_counter()
        tuner = tune.Tuner(
            trivial,
            param_space={"x": tune.uniform(0, 1)},
            tune_config=tune.TuneConfig(num_samples=trials, reuse_actors=True),
            run_config=tune.RunConfig(
                storage_path=tempfile.mkdtemp(prefix="bench-ray-"), verbose=0
            ),
        )
        grid = tuner.fit()
        wall = time.perf_counter() - start
        done = sum(1 for r in grid if r.metrics.get("training_iteration") == reports)
        return {"wall_s": wall, "complete_trials": done}
    finally:
        ray.shutdown()


def side_optuna(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    try:
        import optuna
    except ImportError:
        return {"skipped": "optuna not installed"}
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        score = 0.0
        for i in range(reports):
            score = i * x
            trial.report(score, i)
        return score

    start = time.perf_counter()
    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=trials)
    return {"wall_s": time.perf_counter() - start, "complete_trials": len(study.trials)}


SIDES = {"rayfield-tune": side_rayfield, "ray-tune": side_ray, "optuna": side_optuna}


def run_side(name: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--side",
        name,
        "--trials",
        str(args.trials),
        "--reports",
        str(args.reports),
        "--num-cpus",
        str(args.num_cpus),
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout_s} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps(SIDES[args.side](args.trials, args.reports, args.num_cpus)))
        return 0
    rows = {name: run_side(name, args) for name in SIDES}
    base = rows["rayfield-tune"].get("wall_s")
    results = args.trials * args.reports
    print(
        f"{args.trials} trials x {args.reports} reports of a trivial function trainable, "
        f"{args.num_cpus} CPUs"
    )
    print(f"{'system':15s} {'wall s':>8s} {'ms/trial':>9s} {'ms/result':>10s} {'x rayfield':>11s}")
    for name, row in rows.items():
        if "wall_s" not in row:
            print(f"{name:15s} {row.get('skipped') or row.get('error')}")
            continue
        wall = row["wall_s"]
        ratio = f"{wall / base:.2f}" if base else "-"
        print(
            f"{name:15s} {wall:8.2f} {1000 * wall / args.trials:9.2f} "
            f"{1000 * wall / results:10.3f} {ratio:>11s}  ({row['complete_trials']} complete)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
