"""HyperBand over a classic class trainable (the reference's ``hyperband_example``).

Usage::

    python packages/tune/examples/hyperband_example.py [--smoke-test]

``MyTrainableClass`` uses the classic hooks (``_setup``, ``_train``, ``_save``,
``_restore``); its score grows with ``height`` and ``width``. HyperBand pauses trials at
each milestone and resumes the best from their checkpoints. Exits 1 unless the best trial
is one of the largest configs and every trial ended.
"""

from __future__ import annotations

import json
import math
import os
import random
from typing import Any

from _cli import run_example

from rayfield import tune
from rayfield.tune.schedulers import HyperBandScheduler


class MyTrainableClass(tune.Trainable):
    """Example agent whose learning curve is a random sigmoid depending on its config."""

    def _setup(self, config: dict[str, Any]) -> None:
        self.timestep = 0

    def _train(self) -> dict[str, Any]:
        self.timestep += 1
        v = math.tanh(float(self.timestep) / self.config.get("width", 1))
        v *= self.config.get("height", 1)
        return {"episode_reward_mean": v}

    def _save(self, checkpoint_dir: str) -> str:
        path = os.path.join(checkpoint_dir, "checkpoint")
        with open(path, "w") as f:
            f.write(json.dumps({"timestep": self.timestep}))
        return path

    def _restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path) as f:
            self.timestep = json.loads(f.read())["timestep"]


def main(smoke_test: bool = False, storage_path: str | None = None) -> dict[str, Any]:
    random.seed(0)
    hyperband = HyperBandScheduler(
        time_attr="training_iteration",
        metric="episode_reward_mean",
        mode="max",
        max_t=9 if smoke_test else 100,
    )
    analysis = tune.run(
        MyTrainableClass,
        name="hyperband_test",
        num_samples=8 if smoke_test else 20,
        stop={"training_iteration": 9 if smoke_test else 100},
        config={
            "width": tune.sample_from(lambda spec: 10 + int(90 * random.random())),
            "height": tune.sample_from(lambda spec: int(100 * random.random())),
        },
        scheduler=hyperband,
        local_dir=storage_path,
        verbose=0,
    )
    best = analysis.get_best_trial("episode_reward_mean", "max")
    assert best is not None
    heights = sorted(t.config["height"] for t in analysis)
    return {
        "best_config": best.config,
        "best_reward": best.last_result["episode_reward_mean"],
        "ok": all(t.status == "TERMINATED" for t in analysis)
        and best.config["height"] >= heights[len(heights) // 2],
    }


if __name__ == "__main__":
    run_example(
        main,
        lambda out: f"best config: {out['best_config']}, reward {out['best_reward']:.2f}",
    )
