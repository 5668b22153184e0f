"""ASHA over an SGD classifier on scikit-learn's digits; prints the best config.

Needs scikit-learn (``pip install 'packages/tune[examples]'``).

Usage::

    python packages/tune/examples/asha_digits.py                      # local, 2 CPUs
    python packages/tune/examples/asha_digits.py --address HOST:PORT --temp-dir DIR

Each trial trains ``sklearn.linear_model.SGDClassifier`` one epoch per iteration
(``partial_fit``) and reports its validation accuracy; ASHA (max_t 20, grace period 1,
reduction factor 3) stops the weak configurations early. The data travel once through
the object store (``tune.with_parameters``). Exits 1 if the best validation accuracy is
below 0.9.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import rayfield
from rayfield import tune
from rayfield.tune.schedulers import ASHAScheduler


def load_data(seed: int = 0) -> dict[str, Any]:
    """Digits (1,797 8x8 images) scaled to [0, 1], split 75/25 into train and validation."""
    import numpy as np

    try:
        from sklearn.datasets import load_digits
    except ModuleNotFoundError:
        sys.exit(
            "asha_digits.py needs scikit-learn: pip install 'packages/tune[examples]' "
            "(or pip install scikit-learn)"
        )

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x = x[order] / 16.0
    y = y[order]
    cut = int(len(x) * 0.75)
    return {"x_train": x[:cut], "y_train": y[:cut], "x_val": x[cut:], "y_val": y[cut:]}


def train_sgd(config: dict[str, Any], data: dict[str, Any] | None = None) -> None:
    """One SGDClassifier epoch per iteration; reports ``mean_accuracy`` on validation."""
    import numpy as np
    from sklearn.linear_model import SGDClassifier

    assert data is not None
    model = SGDClassifier(
        loss=config["loss"],
        alpha=config["alpha"],
        learning_rate=config["learning_rate"],
        eta0=config["eta0"],
        random_state=0,
    )
    classes = np.arange(10)
    rng = np.random.default_rng(0)
    for _ in range(20):
        order = rng.permutation(len(data["x_train"]))
        model.partial_fit(data["x_train"][order], data["y_train"][order], classes=classes)
        tune.report({"mean_accuracy": float(model.score(data["x_val"], data["y_val"]))})


SPACE = {
    "loss": tune.choice(["hinge", "log_loss", "modified_huber"]),
    "alpha": tune.loguniform(1e-6, 1e-1),
    "learning_rate": tune.choice(["constant", "invscaling", "adaptive"]),
    "eta0": tune.loguniform(1e-4, 1.0),
}


def main(
    num_samples: int = 40,
    storage_path: str | None = None,
    seed: int = 0,
    verbose: int = 0,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Runs the search (on ``data``, default :func:`load_data`); returns the best config,
    its accuracy and how many epochs ran."""
    import random

    random.seed(seed)
    start = time.perf_counter()
    grid = tune.Tuner(
        tune.with_parameters(train_sgd, data=data if data is not None else load_data()),
        param_space=SPACE,
        tune_config=tune.TuneConfig(
            metric="mean_accuracy",
            mode="max",
            num_samples=num_samples,
            scheduler=ASHAScheduler(max_t=20, grace_period=1, reduction_factor=3),
        ),
        run_config=tune.RunConfig(
            name="asha_digits",
            storage_path=storage_path or tempfile.mkdtemp(prefix="tune-digits-"),
            verbose=verbose,
        ),
    ).fit()
    best = grid.get_best_result()
    epochs = sum(r.metrics.get("training_iteration", 0) for r in grid)
    return {
        "best_config": best.config,
        "val_accuracy": best.metrics["mean_accuracy"],
        "trials": len(grid),
        "epochs": epochs,
        "errors": grid.num_errors,
        "wall_s": time.perf_counter() - start,
        "ok": best.metrics["mean_accuracy"] >= 0.9 and grid.num_errors == 0,
    }


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--address", default=None, help="a cluster started by `rayfield start`")
    parser.add_argument("--temp-dir", default=None, help="with --address: its --temp-dir")
    parser.add_argument("--num-samples", type=int, default=40)
    parser.add_argument("--num-cpus", type=int, default=2, help="without --address")
    parser.add_argument("--storage-path", default=None)
    args = parser.parse_args(argv)
    if args.address:
        rayfield.init(address=args.address, temp_dir=args.temp_dir)
    else:
        rayfield.init(num_cpus=args.num_cpus)
    try:
        out = main(args.num_samples, args.storage_path)
    finally:
        rayfield.shutdown()
    print(f"best config: {out['best_config']}")
    print(f"validation accuracy: {out['val_accuracy']:.4f}")
    print(
        f"{out['trials']} trials, {out['epochs']} epochs of {out['trials'] * 20} without early "
        f"stopping, {out['wall_s']:.1f} s"
    )
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(cli())
