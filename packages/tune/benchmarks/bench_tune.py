"""Tune overhead next to Ray Tune and Optuna, on this machine, in one run.

Usage::

    python bench_tune.py [--trials 200] [--reports 10] [--num-cpus 2] [--json OUT]
        [--ray-python /path/to/ray-venv/bin/python] [--scale-trials 20000]
        [--parts trivial,asha,scale,harness] [--repeat N] [--no-ray]

``--parts asha --no-ray --repeat 5`` runs only the ASHA row of rayfield-tune and Optuna,
five rounds in turns, and prints each run, the medians and the per-round ratios.
``--parts harness --repeat 5``: the outside harness of issue 31 (``harness.py``: the
workloads as the two projects' documentation writes them, ``rayfield.init()`` and data
loading inside the timer).

Workload: ``--trials`` trials of a trivial function trainable that reports ``--reports``
times (no work between reports), so the time is the framework's own overhead. Each
system runs in its own process (a fresh runtime):

* rayfield-tune: ``tune.run`` on ``rayfield.init(num_cpus=N)``, actors reused (default);
* Ray Tune: ``ray.tune.run`` on ``ray.init(num_cpus=N)`` with ``reuse_actors=True``
  (skipped with a note when ``ray[tune]`` is not installed);
* Optuna: an in-process study of the same number of trials (no processes at all).

Prints one row per system (wall seconds, per-trial and per-result milliseconds) and the
ratio to rayfield-tune, and the CPU seconds of the process and its descendants (the
cluster's workers included), which a loaded machine changes less than the wall time. The
timer starts once one trivial task per CPU has run (the cluster's workers are up). Then
ASHA (max_t 20, grace 1, reduction factor 3) over 40 ``SGDClassifier`` configs on digits:
rayfield-tune, Ray Tune and Optuna (random sampler and successive-halving pruner, in
process). Every side loads the data and imports scikit-learn before its timer: Optuna in
its process, the other two in the cluster's workers (through the warm-up tasks, whose
workers the trial actors then take). Then the scale run:
``--scale-trials`` trials of a 10 ms trainable, with the per-trial time of the first and
the last tenth, the driver's peak memory and the mean ``tune_overhead_s``. Nothing is
asserted.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import _compile_rayfield, _median, _ratios, _spread


def _warm(remote: Any, get: Any, cpus: int, imports: tuple[str, ...] = ()) -> None:
    """Run one task per CPU at once: the timer starts once the cluster's workers are up
    and have imported ``imports`` (as the in-process Optuna side has before its timer)."""

    def noop(names: tuple[str, ...]) -> int:
        import importlib

        for name in names:
            importlib.import_module(name)
        time.sleep(0.5)  # held long enough that each task gets a worker of its own
        return os.getpid()

    task = remote(noop)
    get([task.remote(imports) for _ in range(cpus)])


def _tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every live descendant."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def side_rayfield(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    import rayfield
    from rayfield import tune

    rayfield.init(num_cpus=cpus, configure_logging=False)
    _warm(rayfield.remote, rayfield.get, cpus)
    try:

        def trivial(config: dict[str, Any]) -> None:
            for i in range(reports):
                tune.report(score=i * config["x"])

        cpu0, start = _tree_cpu_s(), time.perf_counter()
        analysis = tune.run(
            trivial,
            config={"x": tune.uniform(0, 1)},
            num_samples=trials,
            storage_path=tempfile.mkdtemp(prefix="bench-rf-"),
            verbose=0,
        )
        wall = time.perf_counter() - start
        done = sum(1 for t in analysis if t.last_result.get("training_iteration") == reports)
        return {"wall_s": wall, "cpu_s": _tree_cpu_s() - cpu0, "complete_trials": done}
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
    _warm(ray.remote, ray.get, cpus)
    try:

        def trivial(config: dict[str, Any]) -> None:
            for i in range(reports):
                tune.report({"score": i * config["x"]})

        cpu0, start = _tree_cpu_s(), time.perf_counter()
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
        return {"wall_s": wall, "cpu_s": _tree_cpu_s() - cpu0, "complete_trials": done}
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

    cpu0, start = _tree_cpu_s(), time.perf_counter()
    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=trials)
    return {
        "wall_s": time.perf_counter() - start,
        "cpu_s": _tree_cpu_s() - cpu0,
        "complete_trials": len(study.trials),
    }


def side_rayfield_asha(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    """ASHA (max_t 20, grace 1, rf 3) over 40 SGDClassifier configs on digits."""
    import rayfield

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import asha_digits

    rayfield.init(num_cpus=cpus, configure_logging=False)
    _warm(rayfield.remote, rayfield.get, cpus, ("sklearn.linear_model",))
    data = asha_digits.load_data()  # before the timer, as on the Optuna side
    try:
        cpu0, start = _tree_cpu_s(), time.perf_counter()
        out = asha_digits.main(num_samples=40, data=data)
        return {
            "wall_s": time.perf_counter() - start,
            "cpu_s": _tree_cpu_s() - cpu0,
            "complete_trials": out["trials"],
            "best_accuracy": out["val_accuracy"],
            "epochs": out["epochs"],
        }
    finally:
        rayfield.shutdown()


def side_optuna_asha(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    """The same search in Optuna: random sampler, successive-halving pruner, in process."""
    try:
        import optuna
    except ImportError:
        return {"skipped": "optuna not installed"}
    import numpy as np
    from sklearn.linear_model import SGDClassifier

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import asha_digits

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    data = asha_digits.load_data()
    epochs = 0

    def objective(trial: Any) -> float:
        nonlocal epochs
        model = SGDClassifier(
            loss=trial.suggest_categorical("loss", ["hinge", "log_loss", "modified_huber"]),
            alpha=trial.suggest_float("alpha", 1e-6, 1e-1, log=True),
            learning_rate=trial.suggest_categorical(
                "learning_rate", ["constant", "invscaling", "adaptive"]
            ),
            eta0=trial.suggest_float("eta0", 1e-4, 1.0, log=True),
            random_state=0,
        )
        rng = np.random.default_rng(0)
        acc = 0.0
        for step in range(20):
            order = rng.permutation(len(data["x_train"]))
            model.partial_fit(data["x_train"][order], data["y_train"][order], classes=np.arange(10))
            epochs += 1
            acc = float(model.score(data["x_val"], data["y_val"]))
            trial.report(acc, step + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return acc

    cpu0, start = _tree_cpu_s(), time.perf_counter()
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
    )
    study.optimize(objective, n_trials=40)
    return {
        "wall_s": time.perf_counter() - start,
        "cpu_s": _tree_cpu_s() - cpu0,
        "complete_trials": len(study.trials),
        "best_accuracy": study.best_value,
        "epochs": epochs,
    }


def side_ray_asha(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    """The digits ASHA search in Ray Tune (same space, scheduler and data split)."""
    try:
        import ray
        from ray import tune
        from ray.tune.schedulers import ASHAScheduler
    except ImportError as exc:
        return {"skipped": f"ray[tune] not installed ({exc.name})"}
    import numpy as np
    from sklearn.datasets import load_digits

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y, cut = x[order] / 16.0, y[order], int(len(x) * 0.75)

    def train(config: dict[str, Any], data: Any = None) -> None:
        from sklearn.linear_model import SGDClassifier

        xt, yt, xv, yv = data
        model = SGDClassifier(
            loss=config["loss"],
            alpha=config["alpha"],
            learning_rate=config["learning_rate"],
            eta0=config["eta0"],
            random_state=0,
        )
        rng = np.random.default_rng(0)
        for _ in range(20):
            perm = rng.permutation(len(xt))
            model.partial_fit(xt[perm], yt[perm], classes=np.arange(10))
            tune.report({"mean_accuracy": float(model.score(xv, yv))})

    ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR")
    _warm(ray.remote, ray.get, cpus, ("sklearn.linear_model",))
    try:
        cpu0, start = _tree_cpu_s(), time.perf_counter()
        grid = tune.Tuner(
            tune.with_parameters(train, data=(x[:cut], y[:cut], x[cut:], y[cut:])),
            param_space={
                "loss": tune.choice(["hinge", "log_loss", "modified_huber"]),
                "alpha": tune.loguniform(1e-6, 1e-1),
                "learning_rate": tune.choice(["constant", "invscaling", "adaptive"]),
                "eta0": tune.loguniform(1e-4, 1.0),
            },
            tune_config=tune.TuneConfig(
                metric="mean_accuracy",
                mode="max",
                num_samples=40,
                scheduler=ASHAScheduler(max_t=20, grace_period=1, reduction_factor=3),
            ),
            run_config=tune.RunConfig(
                storage_path=tempfile.mkdtemp(prefix="bench-ray-asha-"), verbose=0
            ),
        ).fit()
        wall = time.perf_counter() - start
        best = grid.get_best_result()
        return {
            "wall_s": wall,
            "cpu_s": _tree_cpu_s() - cpu0,
            "complete_trials": len(grid),
            "best_accuracy": best.metrics["mean_accuracy"],
            "epochs": sum(r.metrics.get("training_iteration", 0) for r in grid),
        }
    finally:
        ray.shutdown()


def side_rayfield_scale(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    """``trials`` trials of a 10 ms trainable: per-trial time of the first and last tenth,
    the driver's peak memory and the mean ``tune_overhead_s``."""
    import resource

    import rayfield
    from rayfield import tune

    rayfield.init(num_cpus=cpus, configure_logging=False)
    marks: list[float] = []
    overheads: list[float] = []

    class Mark(tune.Callback):
        def on_trial_result(self, trial: Any, result: dict[str, Any]) -> None:
            overheads.append(result.get("tune_overhead_s", 0.0))

        def on_trial_complete(self, trial: Any) -> None:
            marks.append(time.perf_counter())

    def ten_ms(config: dict[str, Any]) -> None:
        time.sleep(0.01)
        tune.report(score=config["x"])

    try:
        start = time.perf_counter()
        tune.run(
            ten_ms,
            config={"x": tune.uniform(0, 1)},
            num_samples=trials,
            storage_path=tempfile.mkdtemp(prefix="bench-scale-"),
            verbose=0,
            callbacks=[Mark()],
        )
        wall = time.perf_counter() - start
    finally:
        rayfield.shutdown()
    k = max(len(marks) // 10, 1)
    return {
        "wall_s": wall,
        "complete_trials": len(marks),
        "first_tenth_ms_per_trial": 1000 * (marks[k - 1] - start) / k,
        "last_tenth_ms_per_trial": 1000 * (marks[-1] - marks[-k - 1]) / k,
        "driver_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "mean_tune_overhead_ms": 1000 * sum(overheads) / max(len(overheads), 1),
    }


SIDES = {"rayfield-tune": side_rayfield, "ray-tune": side_ray, "optuna": side_optuna}
EXTRA = {
    "rayfield-asha-digits": side_rayfield_asha,
    "optuna-asha-digits": side_optuna_asha,
    "ray-asha-digits": side_ray_asha,
    "rayfield-scale": side_rayfield_scale,
}


def run_side(name: str, args: argparse.Namespace) -> dict[str, Any]:
    python = args.ray_python if name.startswith("ray-") else sys.executable
    cmd = [
        python,
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


def run_rounds(
    names: tuple[str, ...], args: argparse.Namespace
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Each side ``args.repeat`` times, the sides taking turns within each round (so
    that a change in the machine's load falls on all of them); returns the first run of
    each side as its row (with ``runs`` and ``median_wall_s`` when repeated) and every
    run per side."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for _ in range(args.repeat):
        for name in names:
            runs[name].append(run_side(name, args))
    rows = {}
    for name, done in runs.items():
        row = dict(done[0])
        walls = [r["wall_s"] for r in done if "wall_s" in r]
        if args.repeat > 1 and walls:
            row["runs_wall_s"] = walls
            row["median_wall_s"] = _median(walls)
        rows[name] = row
    return rows, runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument(
        "--ray-python",
        default=sys.executable,
        help="the interpreter of an environment with ray[tune] (and scikit-learn, psutil)",
    )
    parser.add_argument(
        "--scale-trials",
        type=int,
        default=20_000,
        help="trials of the 10 ms scale run (0: skip it)",
    )
    parser.add_argument(
        "--parts",
        default="trivial,asha,scale",
        help="comma-separated: trivial, asha, scale (default), harness (see harness.py)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each side of the trivial and ASHA parts this many times, the sides "
        "taking turns; prints the median and the per-round ratios",
    )
    parser.add_argument("--no-ray", action="store_true", help="leave out the Ray Tune sides")
    parser.add_argument(
        "--harness-base-src",
        default=None,
        help="with --parts harness: also run the rayfield sides on this packages/tune/src "
        "(other code, e.g. main's from git archive), in the same rounds",
    )
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="do not byte-compile rayfield's sources first (an editable install run with "
        "PYTHONDONTWRITEBYTECODE=1 then compiles every module it imports, in every process)",
    )
    parser.add_argument("--side", choices=sorted({**SIDES, **EXTRA}), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        side = {**SIDES, **EXTRA}[args.side]
        print(json.dumps(side(args.trials, args.reports, args.num_cpus)))
        return 0
    if not args.no_compile:
        _compile_rayfield()
        if args.harness_base_src:  # the other sources as this code's
            import compileall

            compileall.compile_dir(args.harness_base_src, quiet=2)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    rows: dict[str, dict[str, Any]] = {}
    unknown = parts - {"trivial", "asha", "scale", "harness"}
    if unknown or args.repeat < 1:
        parser.error(
            f"--parts: trivial, asha, scale, harness (not {sorted(unknown)}); --repeat >= 1"
        )
    if "harness" in parts:
        import harness

        rows["harness"] = harness.main(
            args.repeat, args.num_cpus, args.timeout_s, args.harness_base_src
        )

    def keep(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(n for n in names if not (args.no_ray and n.startswith("ray-")))

    if "trivial" in parts:
        trivial, runs = run_rounds(keep(tuple(SIDES)), args)
        rows.update(trivial)
        print_trivial(trivial, runs, args)
    if "asha" in parts:
        asha_sides = keep(("rayfield-asha-digits", "ray-asha-digits", "optuna-asha-digits"))
        asha, runs = run_rounds(asha_sides, args)
        rows.update(asha)
        if rows.keys() - asha.keys():
            print()
        print("ASHA (max_t 20, grace 1, rf 3) over 40 SGDClassifier configs on digits")
        for name, row in asha.items():
            if "wall_s" not in row:
                print(f"{name:22s} {row.get('skipped') or row.get('error')}")
                continue
            for i, run in enumerate(runs[name]):
                if "wall_s" not in run:
                    print(f"{name:22s} {run.get('error')}")
                    continue
                label = name if i == 0 else ""
                print(
                    f"{label:22s} {run['wall_s']:7.2f} s  cpu {run.get('cpu_s', 0.0):5.2f} s  "
                    f"best accuracy {run['best_accuracy']:.4f}  {run['epochs']} epochs  "
                    f"{1000 * run['wall_s'] / max(run['epochs'], 1):5.1f} ms/epoch"
                )
            if spread := _spread(row):
                print(f"{'':22s}{spread}")
        if ratio := _ratios(runs, "rayfield-asha-digits", "optuna-asha-digits"):
            print(ratio)
        per_epoch = _ratios(runs, "rayfield-asha-digits", "optuna-asha-digits", "epochs")
        if per_epoch:
            print(per_epoch)
    if "scale" in parts and args.scale_trials:
        scale_args = argparse.Namespace(**{**vars(args), "trials": args.scale_trials})
        row = run_side("rayfield-scale", scale_args)
        rows["rayfield-scale"] = row
        if len(rows) > 1:
            print()
        print(f"scale: {args.scale_trials} trials of a 10 ms function trainable")
        if "wall_s" in row:
            print(
                f"  wall {row['wall_s']:.1f} s; per trial: first tenth "
                f"{row['first_tenth_ms_per_trial']:.1f} ms, last tenth "
                f"{row['last_tenth_ms_per_trial']:.1f} ms; driver peak RSS "
                f"{row['driver_maxrss_mb']:.0f} MB; mean tune_overhead_s "
                f"{row['mean_tune_overhead_ms']:.2f} ms"
            )
        else:
            print(f"  {row.get('error')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


def print_trivial(
    rows: dict[str, dict[str, Any]],
    runs: dict[str, list[dict[str, Any]]],
    args: argparse.Namespace,
) -> None:
    base = rows["rayfield-tune"].get("median_wall_s", rows["rayfield-tune"].get("wall_s"))
    results = args.trials * args.reports
    print(
        f"{args.trials} trials x {args.reports} reports of a trivial function trainable, "
        f"{args.num_cpus} CPUs"
    )
    print(
        f"{'system':15s} {'wall s':>8s} {'cpu s':>7s} {'ms/trial':>9s} {'ms/result':>10s} "
        f"{'x rayfield':>11s}"
    )
    for name, row in rows.items():
        if "wall_s" not in row:
            print(f"{name:15s} {row.get('skipped') or row.get('error')}")
            continue
        wall = row.get("median_wall_s", row["wall_s"])
        ratio = f"{wall / base:.2f}" if base else "-"
        print(
            f"{name:15s} {wall:8.2f} {row.get('cpu_s', float('nan')):7.2f} "
            f"{1000 * wall / args.trials:9.2f} "
            f"{1000 * wall / results:10.3f} {ratio:>11s}  ({row['complete_trials']} complete)"
            f"{_spread(row)}"
        )
    if ratio_line := _ratios(runs, "rayfield-tune", "optuna"):
        print(ratio_line)


if __name__ == "__main__":
    sys.exit(main())
