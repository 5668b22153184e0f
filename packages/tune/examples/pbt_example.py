"""Population based training of a toy model whose best learning rate changes over time.

Usage::

    python packages/tune/examples/pbt_example.py [--smoke-test]

The toy's accuracy grows by an amount that peaks when ``lr`` is near an optimum that
decays over training (so a good schedule anneals ``lr``). PBT copies the best trials'
checkpoints and perturbs their ``lr``; the log of mutations lands in
``pbt_global.txt``. Exits 1 unless PBT beat the same population trained without it.
"""

from __future__ import annotations

from typing import Any

from _cli import run_example

from rayfield import tune
from rayfield.tune.schedulers import FIFOScheduler, PopulationBasedTraining


class Toy(tune.Trainable):
    """accuracy += step(lr), largest when lr is close to 0.1 * 0.9**(t/5)."""

    def setup(self, config: dict[str, Any]) -> None:
        self.accuracy = 0.0

    def step(self) -> dict[str, Any]:
        best_lr = 0.1 * 0.9 ** (self.iteration / 5)
        gap = abs(self.config["lr"] - best_lr) / best_lr
        self.accuracy += max(0.0, 1.0 - gap) * 0.05
        return {"mean_accuracy": self.accuracy, "lr": self.config["lr"]}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"accuracy": self.accuracy}

    def load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.accuracy = checkpoint["accuracy"]

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.accuracy = 0.0
        return True


def main(smoke_test: bool = False, storage_path: str | None = None) -> dict[str, Any]:
    iterations = 20 if smoke_test else 60
    space = {"lr": tune.grid_search([0.001, 0.01, 0.02, 0.3, 0.5, 0.9])}
    common = {
        "stop": {"training_iteration": iterations},
        "config": space,
        "local_dir": storage_path,
        "verbose": 0,
    }
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="mean_accuracy",
        mode="max",
        perturbation_interval=4,
        hyperparam_mutations={"lr": tune.loguniform(1e-4, 1.0)},
        seed=0,
    )
    with_pbt = tune.run(Toy, name="pbt_toy", scheduler=pbt, **common)
    without = tune.run(Toy, name="no_pbt_toy", scheduler=FIFOScheduler(), **common)
    best_pbt = max(t.last_result["mean_accuracy"] for t in with_pbt)
    best_fixed = max(t.last_result["mean_accuracy"] for t in without)
    return {
        "best_with_pbt": best_pbt,
        "best_without": best_fixed,
        "perturbations": pbt.num_perturbations,
        "ok": best_pbt > best_fixed,
    }


if __name__ == "__main__":
    run_example(
        main,
        lambda out: (
            f"best accuracy with PBT {out['best_with_pbt']:.3f}, without "
            f"{out['best_without']:.3f} ({out['perturbations']} perturbations)"
        ),
    )
