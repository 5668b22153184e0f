"""`VectorEnv`: gymnasium envs wrapped for a worker, and a user's own vectorised env
trained through an env creator."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import VectorEnv, register_env


class BitMatchVector(VectorEnv):
    """``num_envs`` games in numpy arrays: each step shows a random bit (Box[1]);
    reward 1 when the action equals it; 10 steps per episode (random play: 5)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(
            gym.spaces.Box(0.0, 1.0, (1,), np.float32),
            gym.spaces.Discrete(2),
            int(config.get("num_envs", 6)),
        )
        self.rng = np.random.default_rng(0)
        self.bits = np.zeros(self.num_envs, dtype=np.int64)
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        self.resets = 0

    def _obs(self, i: int) -> np.ndarray:
        self.bits[i] = self.rng.integers(2)
        return np.array([self.bits[i]], np.float32)

    def vector_reset(self, *, seeds: Any = None, options: Any = None) -> Any:
        obs = [self.reset_at(i)[0] for i in range(self.num_envs)]
        return obs, [{} for _ in obs]

    def reset_at(self, index: int, *, seed: Any = None, options: Any = None) -> Any:
        self.resets += 1
        self.t[index] = 0
        return self._obs(index), {}

    def vector_step(self, actions: Any) -> Any:
        rewards = (np.asarray(actions) == self.bits).astype(np.float32)
        self.t += 1
        obs = [self._obs(i) for i in range(self.num_envs)]
        truncs = (self.t >= 10).tolist()
        return obs, rewards.tolist(), [False] * self.num_envs, truncs, [{}] * self.num_envs


register_env("BitMatchVector", BitMatchVector)


def test_vectorize_gym_envs() -> None:
    vec = VectorEnv.vectorize_gym_envs(lambda i: gym.make("CartPole-v1"), num_envs=3)
    assert vec.num_envs == 3 and len(vec.get_unwrapped()) == 3
    obs, infos = vec.vector_reset(seeds=[1, 2, 3])
    again, _ = VectorEnv.wrap(lambda i: gym.make("CartPole-v1"), num_envs=3).vector_reset(
        seeds=[1, 2, 3]
    )
    assert np.array_equal(np.stack(obs), np.stack(again)) and len(infos) == 3
    obs, rewards, terms, truncs, infos = vec.vector_step([0, 1, 0])
    assert len(obs) == 3 and rewards == [1.0, 1.0, 1.0]
    assert terms == [False] * 3 and truncs == [False] * 3 and len(infos) == 3
    assert vec.reset_at(1, seed=5)[0].shape == (4,)
    with pytest.raises(ValueError, match="make_env"):
        VectorEnv.vectorize_gym_envs(existing_envs=[gym.make("CartPole-v1")], num_envs=2)
    vec.close()


def test_a_users_vector_env_trains() -> None:
    config = {
        "num_workers": 0,
        "num_envs_per_worker": 1,  # ignored: the VectorEnv has its own 6 sub-envs
        "rollout_fragment_length": 50,
        "train_batch_size": 300,
        "lr": 0.02,
        "gamma": 0.5,
        "seed": 0,
        "model": {"fcnet_hiddens": [8]},
        "batch_mode": "truncate_episodes",
    }
    trainer = get_trainer_class("PG")(env="BitMatchVector", config=config)
    try:
        worker = trainer.workers.local_worker()
        assert worker.vector_env is not None and worker.vector_env.num_envs == 6
        assert worker.sample().count == 300
        for _ in range(30):
            result = trainer.train()
            if result["episode_reward_mean"] >= 9.0:
                break
        assert worker.vector_env.resets > 6  # finished sub-envs were reset one by one
    finally:
        trainer.stop()
    assert result["episode_reward_mean"] >= 9.0, result["episode_reward_mean"]
    assert result["episode_len_mean"] == 10
