"""The outside harness of issue 31: the workloads as Ray's and Optuna's documentation
write them, timed as a user times the script.

Each side is a function run in a fresh process by ``bench_tune.py --parts harness``. The
timer starts before the framework is imported and stops when the search returns, so it
counts ``rayfield.init()`` (the cluster's start), the trainable loading its data in
every fresh worker, and everything the framework does per trial and per result:

* ``asha``: ASHA (max_t 20, grace 1, reduction factor 3) over 40 ``SGDClassifier``
  configs on digits, one ``partial_fit`` epoch per report. Tune:
  ``tune.run(trainable, config=..., num_samples=40, scheduler=ASHAScheduler(...))`` with
  the trainable calling ``load_digits`` itself (Ray's examples); the ``wp`` form passes
  the data with ``tune.with_parameters`` (loaded by the driver, inside the timer).
  Optuna: ``study.optimize`` with ``SuccessiveHalvingPruner(min_resource=1,
  reduction_factor=3)`` and ``trial.report``/``should_prune``, the objective loading the
  data itself (or, in the ``wp`` form, once before ``optimize``);
* ``trivial``: 200 trials x 10 reports of a function that does nothing else,
  ``reuse_actors=True``; Optuna: 200 trials reporting 10 times each.

Both sides draw the same four hyperparameters from the same ranges (each with its own
random stream: the best accuracies agree to about a percent, not exactly).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

__all__ = ["SIDES", "main"]

EPOCHS = 20
SAMPLES = 40


def _split(seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """Digits scaled to [0, 1], shuffled with ``seed``, split 75/25 (train, validation)."""
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y, cut = x[order] / 16.0, y[order], int(len(x) * 0.75)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def rayfield_asha(with_parameters: bool, cpus: int) -> dict[str, Any]:
    start = time.perf_counter()
    import rayfield
    from rayfield import tune
    from rayfield.tune.schedulers import ASHAScheduler

    def train_digits(config: dict[str, Any], data: Any = None) -> None:
        import numpy as np
        from sklearn.linear_model import SGDClassifier

        xt, yt, xv, yv = data if data is not None else _split()
        model = SGDClassifier(
            loss=config["loss"],
            alpha=config["alpha"],
            learning_rate=config["learning_rate"],
            eta0=config["eta0"],
            random_state=0,
        )
        rng = np.random.default_rng(0)
        for _ in range(EPOCHS):
            order = rng.permutation(len(xt))
            model.partial_fit(xt[order], yt[order], classes=np.arange(10))
            tune.report(mean_accuracy=float(model.score(xv, yv)))

    rayfield.init(num_cpus=cpus, configure_logging=False)
    init_s = time.perf_counter() - start
    trainable: Any = train_digits
    if with_parameters:
        trainable = tune.with_parameters(train_digits, data=_split())
    analysis = tune.run(
        trainable,
        config={
            "loss": tune.choice(["hinge", "log_loss", "modified_huber"]),
            "alpha": tune.loguniform(1e-6, 1e-1),
            "learning_rate": tune.choice(["constant", "invscaling", "adaptive"]),
            "eta0": tune.loguniform(1e-4, 1.0),
        },
        num_samples=SAMPLES,
        scheduler=ASHAScheduler(
            metric="mean_accuracy", mode="max", max_t=EPOCHS, grace_period=1, reduction_factor=3
        ),
        storage_path=tempfile.mkdtemp(prefix="harness-asha-"),
        verbose=0,
    )
    wall = time.perf_counter() - start
    best = analysis.get_best_trial("mean_accuracy", "max", "last")
    epochs = sum(t.last_result.get("training_iteration", 0) for t in analysis.trials)
    rayfield.shutdown()
    return {
        "wall_s": wall,
        "init_s": init_s,
        "best_accuracy": best.last_result["mean_accuracy"],
        "epochs": epochs,
        "complete_trials": len(analysis.trials),
    }


def optuna_asha(with_parameters: bool, cpus: int) -> dict[str, Any]:
    start = time.perf_counter()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shared = _split() if with_parameters else None
    epochs = 0

    def objective(trial: Any) -> float:
        nonlocal epochs
        import numpy as np
        from sklearn.linear_model import SGDClassifier

        xt, yt, xv, yv = shared if shared is not None else _split()
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
        for step in range(EPOCHS):
            order = rng.permutation(len(xt))
            model.partial_fit(xt[order], yt[order], classes=np.arange(10))
            epochs += 1
            acc = float(model.score(xv, yv))
            trial.report(acc, step + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return acc

    study = optuna.create_study(
        direction="maximize",
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
    )
    study.optimize(objective, n_trials=SAMPLES)
    wall = time.perf_counter() - start
    best = max(
        (
            t.intermediate_values[max(t.intermediate_values)]
            for t in study.trials
            if t.intermediate_values
        ),
        default=0.0,
    )
    return {
        "wall_s": wall,
        "best_accuracy": best,
        "epochs": epochs,
        "complete_trials": len(study.trials),
    }


def rayfield_trivial(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    start = time.perf_counter()
    import rayfield
    from rayfield import tune

    def trivial(config: dict[str, Any]) -> None:
        for i in range(reports):
            tune.report(score=i * config["x"])

    rayfield.init(num_cpus=cpus, configure_logging=False)
    init_s = time.perf_counter() - start
    analysis = tune.run(
        trivial,
        config={"x": tune.uniform(0, 1)},
        num_samples=trials,
        reuse_actors=True,
        storage_path=tempfile.mkdtemp(prefix="harness-trivial-"),
        verbose=0,
    )
    wall = time.perf_counter() - start
    done = sum(1 for t in analysis.trials if t.last_result.get("training_iteration") == reports)
    rayfield.shutdown()
    return {"wall_s": wall, "init_s": init_s, "complete_trials": done}


def optuna_trivial(trials: int, reports: int, cpus: int) -> dict[str, Any]:
    start = time.perf_counter()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        score = 0.0
        for i in range(reports):
            score = i * x
            trial.report(score, i)
        return score

    study = optuna.create_study(direction="maximize")
    study.optimize(objective, n_trials=trials)
    return {"wall_s": time.perf_counter() - start, "complete_trials": len(study.trials)}


SIDES = {
    "harness-rayfield-asha": lambda t, r, c: rayfield_asha(False, c),
    "harness-optuna-asha": lambda t, r, c: optuna_asha(False, c),
    "harness-rayfield-asha-wp": lambda t, r, c: rayfield_asha(True, c),
    "harness-optuna-asha-wp": lambda t, r, c: optuna_asha(True, c),
    "harness-rayfield-trivial": rayfield_trivial,
    "harness-optuna-trivial": optuna_trivial,
}

PAIRS = {
    "asha (trainable loads its data)": ("harness-rayfield-asha", "harness-optuna-asha"),
    "asha (tune.with_parameters)": ("harness-rayfield-asha-wp", "harness-optuna-asha-wp"),
    "trivial (200 x 10, reuse_actors)": ("harness-rayfield-trivial", "harness-optuna-trivial"),
}


def _one(name: str, cpus: int, timeout_s: float, tune_src: str | None = None) -> dict[str, Any]:
    """One side in a fresh process (this file run as a script); with ``tune_src``, the
    rayfield-tune sources imported are that directory's (``PYTHONPATH`` first)."""
    import json
    import os
    import subprocess
    import sys

    cmd = [sys.executable, __file__, name, "200", "10", str(cpus)]
    env = None
    if tune_src is not None:
        path = os.environ.get("PYTHONPATH", "")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tune_src, path) if p)}
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


BASE = "base: "  # the rayfield side run with other rayfield-tune sources (``base_src``)


def _ratios(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[float]:
    """Per-round wall-time ratios a / b of the rounds both finished."""
    both = [(x, y) for x, y in zip(a, b, strict=True) if "wall_s" in x and "wall_s" in y]
    return [x["wall_s"] / y["wall_s"] for x, y in both]


def main(
    rounds: int = 5, cpus: int = 2, timeout_s: float = 600.0, base_src: str | None = None
) -> dict[str, Any]:
    """Each pair ``rounds`` times, the two sides alternating; prints every run, the
    medians and the median of the per-round ratios (rayfield / Optuna), with the load
    average before and after; returns the rows.

    With ``base_src`` (a ``packages/tune/src`` of other code, e.g. ``git archive main``'s)
    each round first runs the rayfield side on it too, and prints its ratios to Optuna
    and this code's to it."""
    import os
    import statistics

    rows: dict[str, Any] = {"load_before": os.getloadavg()}
    print(f"outside harness, {rounds} alternating rounds, load {rows['load_before'][0]:.2f}")
    for label, (ours, theirs) in PAIRS.items():
        order = ([BASE + ours] if base_src else []) + [ours, theirs]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
        for _ in range(rounds):
            for name in order:
                base = name.startswith(BASE)
                side = name.removeprefix(BASE)
                runs[name].append(_one(side, cpus, timeout_s, base_src if base else None))
        ratios = _ratios(runs[ours], runs[theirs])
        print(label)
        for name, done in runs.items():
            walls = [r["wall_s"] for r in done if "wall_s" in r]
            best = [r["best_accuracy"] for r in done if "best_accuracy" in r]
            errors = [r["error"] for r in done if "error" in r]
            median = statistics.median(walls) if walls else float("nan")
            extra = f"  best accuracy median {statistics.median(best):.4f}" if best else ""
            print(
                f"  {name:26s} median {median:6.2f} s ({', '.join(f'{w:.2f}' for w in walls)})"
                f"{extra}{'  errors: ' + '; '.join(errors) if errors else ''}"
            )
        if ratios:
            print(f"  rayfield / optuna per round: median {statistics.median(ratios):.2f}")
        if base_src:
            for what, (a, b) in {
                "base / optuna": (BASE + ours, theirs),
                "rayfield / base": (ours, BASE + ours),
            }.items():
                pair = _ratios(runs[a], runs[b])
                if pair:
                    print(f"  {what} per round: median {statistics.median(pair):.2f}")
        rows[label] = {"runs": runs, "ratios": ratios}
    rows["load_after"] = os.getloadavg()
    print(f"load after: {rows['load_after'][0]:.2f}")
    return rows


if __name__ == "__main__":  # run as a script: the trainables are pickled by value
    import json
    import sys

    if len(sys.argv) > 1 and sys.argv[1] in SIDES:
        name, trials, reports, cpus = sys.argv[1], *map(int, sys.argv[2:5])
        print(json.dumps(SIDES[name](trials, reports, cpus)))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
