"""Callbacks that record the pole angle of each CartPole episode as a custom metric.

python custom_metrics_and_callbacks.py --iterations 5
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from rayfield.rllib.agents.pg import PGTrainer
from rayfield.rllib.algorithms.callbacks import DefaultCallbacks


class PoleAngleCallbacks(DefaultCallbacks):
    def on_episode_start(
        self, *, worker: Any, base_env: Any, policies: Any, episode: Any, **kwargs: Any
    ) -> None:
        episode.user_data["pole_angles"] = []

    def on_episode_step(self, *, worker: Any, base_env: Any, episode: Any, **kwargs: Any) -> None:
        episode.user_data["pole_angles"].append(abs(episode.last_observation_for()[2]))

    def on_episode_end(
        self, *, worker: Any, base_env: Any, policies: Any, episode: Any, **kwargs: Any
    ) -> None:
        episode.custom_metrics["pole_angle"] = float(np.mean(episode.user_data["pole_angles"]))

    def on_train_result(self, *, result: dict[str, Any], **kwargs: Any) -> None:
        result["callback_ok"] = True


def main(iterations: int = 5) -> dict[str, Any]:
    trainer = PGTrainer(env="CartPole-v1", config={"callbacks": PoleAngleCallbacks})
    try:
        for _ in range(iterations):
            result = trainer.train()
            print("pole angle (mean over episodes):", result["custom_metrics"]["pole_angle_mean"])
        return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=5)
    main(parser.parse_args().iterations)
