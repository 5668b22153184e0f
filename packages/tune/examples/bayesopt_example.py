"""Bayesian optimisation of a classic function trainable (the reference's bayesopt example).

Usage::

    python packages/tune/examples/bayesopt_example.py [--smoke-test]

``easy_objective(config, reporter)`` reports a loss with its minimum at width=15,
height=-40; ``GPSearch`` (the built-in GP + expected improvement, no extra) proposes the next
point from the finished ones, two trials at a time, with ASHA stopping poor ones early.
Exits 1 unless the best loss is below 1 (random search with 15 samples gets there about
one time in five).
"""

from __future__ import annotations

import time
from typing import Any

from _cli import run_example

from rayfield import tune
from rayfield.tune.schedulers import AsyncHyperBandScheduler
from rayfield.tune.search import ConcurrencyLimiter
from rayfield.tune.search.gp import GPSearch


def easy_objective(config: dict[str, Any], reporter: Any) -> None:
    for i in range(config["iterations"]):
        loss = ((config["width"] - 15) ** 2 / 10 + abs(config["height"] + 40)) / (1 + i / 10)
        reporter(timesteps_total=i, mean_loss=loss)
        time.sleep(0.01)


def main(smoke_test: bool = False, storage_path: str | None = None) -> dict[str, Any]:
    space = {"width": tune.uniform(0, 20), "height": tune.uniform(-100, 100)}
    search = ConcurrencyLimiter(
        GPSearch(space, metric="mean_loss", mode="min", random_state=0, n_initial_points=5),
        max_concurrent=2,
    )
    analysis = tune.run(
        easy_objective,
        name="bayesopt_example",
        search_alg=search,
        scheduler=AsyncHyperBandScheduler(metric="mean_loss", mode="min", max_t=10, grace_period=2),
        num_samples=15 if smoke_test else 40,
        config={"iterations": 10},
        local_dir=storage_path,
        verbose=0,
    )
    best = analysis.get_best_trial("mean_loss", "min")
    assert best is not None
    loss = best.last_result["mean_loss"]  # 0 at the optimum
    return {"best_config": best.config, "best_loss": loss, "ok": loss < 1.0}


if __name__ == "__main__":
    run_example(
        main,
        lambda out: f"best config: {out['best_config']}, loss {out['best_loss']:.3f}",
    )
