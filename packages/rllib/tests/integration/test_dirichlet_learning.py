"""PPO with a Dirichlet policy on a `Simplex` action space: an allocation among three
options, rewarded by the share given to the third, moves its mean share there."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.utils.spaces import Simplex

PAYOFF = np.array([0.0, 0.0, 1.0], dtype=np.float32)


class Allocation(gym.Env):  # type: ignore[type-arg]
    """One step: reward = the share of the allocation given to option 3."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = Simplex((3,))

    def __init__(self, config: Any = None) -> None:
        self.seen: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        action = np.asarray(action)
        assert self.action_space.contains(action), action
        return np.zeros(1, np.float32), float(action @ PAYOFF), True, False, {}


def test_ppo_learns_an_allocation_with_a_dirichlet_policy() -> None:
    config = {
        "num_workers": 0,
        "seed": 0,
        "train_batch_size": 400,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 10,
        "rollout_fragment_length": 400,
        "lr": 3e-3,
        "model": {"fcnet_hiddens": [16]},
    }
    trainer = PPOTrainer(env=Allocation, config=config)
    try:
        first = trainer.train()["episode_reward_mean"]
        for _ in range(12):
            result = trainer.train()
            if result["episode_reward_mean"] >= 0.6:
                break
        greedy = trainer.compute_action(np.zeros(1, np.float32), explore=False)
    finally:
        trainer.stop()
    assert first < 0.5  # uniform at first: a third on average
    assert result["episode_reward_mean"] >= 0.6, result["episode_reward_mean"]
    assert greedy[2] > 0.6 and abs(float(np.sum(greedy)) - 1.0) < 1e-5
