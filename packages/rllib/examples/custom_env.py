"""A custom env class (configured through env_config) trained with PPO.

python custom_env.py --iterations 20
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np

from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.env import EnvContext


class SimpleCorridor(gym.Env):
    """Walk right to the end of a corridor of ``corridor_length`` cells."""

    def __init__(self, config: EnvContext) -> None:
        self.end_pos = config["corridor_length"]
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0.0, self.end_pos, (1,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.cur_pos = 0
        return np.array([self.cur_pos], dtype=np.float32), {}

    def step(self, action: int) -> Any:
        if action == 0 and self.cur_pos > 0:
            self.cur_pos -= 1
        elif action == 1:
            self.cur_pos += 1
        done = self.cur_pos >= self.end_pos
        obs = np.array([self.cur_pos], dtype=np.float32)
        return obs, 1.0 if done else -0.1, done, False, {}


def main(iterations: int = 20) -> dict[str, Any]:
    trainer = PPOTrainer(
        env=SimpleCorridor,
        config={
            "env_config": {"corridor_length": 5},
            "num_workers": 0,
            "train_batch_size": 400,
            "sgd_minibatch_size": 100,
            "num_sgd_iter": 5,
            "horizon": 100,
        },
    )
    try:
        for _ in range(iterations):
            result = trainer.train()
            print(f"iter {result['training_iteration']} reward {result['episode_reward_mean']:.2f}")
        return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=20)
    main(parser.parse_args().iterations)
