"""A Tune driver for the kill-and-resume test: ``python resume_driver.py RESULTS_DIR``."""

from __future__ import annotations

import json
import os
import sys
import time

from rayfield import tune


def slow_trial(config):
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with open(os.path.join(ckpt.path, "step.json")) as f:
            start = json.load(f)["step"]
    for step in range(start, 5):
        time.sleep(config["sleep_s"])
        folder = os.path.join(tune.get_trial_dir(), f"pending_{step}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "step.json"), "w") as f:
            json.dump({"step": step + 1}, f)
        tune.report(
            {"step": step + 1, "resumed": start > 0},
            checkpoint=tune.Checkpoint.from_directory(folder),
        )


def run(results_dir: str, sleep_s: float, resume: bool) -> tune.ExperimentAnalysis:
    return tune.run(
        slow_trial,
        name="killed",
        config={"i": tune.grid_search(list(range(6))), "sleep_s": sleep_s},
        local_dir=results_dir,
        resume=resume,
        verbose=0,
        global_checkpoint_period=0.2,  # states mid-trial, so that a kill finds one
    )


if __name__ == "__main__":
    import rayfield

    rayfield.init(num_cpus=2, temp_dir=sys.argv[2])
    run(sys.argv[1], 0.4, resume=False)
