"""`BaseEnv`: conversions from gymnasium, vector and multi-agent envs, and a user's
own poll-driven env trained by a rollout worker."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import BaseEnv, MultiAgentEnv, register_env


class TwoStepGame(MultiAgentEnv):
    """Agents "a" and "b" act twice; reward 1 each for action 1; then the end."""

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        return {"a": 0, "b": 0}, {}

    def step(self, action_dict: dict[str, Any]) -> Any:
        self.t += 1
        rewards = {k: float(v) for k, v in action_dict.items()}
        return {"a": self.t, "b": self.t}, rewards, {"__all__": self.t >= 2}, {}, {}


def test_gym_env_to_base_env() -> None:
    base = BaseEnv.to_base_env(gym.make("CartPole-v1"), lambda i: gym.make("CartPole-v1"), 2)
    assert base.num_envs == 2 and len(base.get_sub_environments()) == 2
    obs, rewards, terms, truncs, infos, off = base.poll()
    assert set(obs) == {0, 1} and set(obs[0]) == {"agent0"} and off == {}
    assert terms[0] == truncs[0] == {"__all__": False} and set(infos) == {0, 1}
    assert base.poll()[0] == {}  # nothing new until actions are sent
    base.send_actions({0: {"agent0": 0}, 1: {"agent0": 1}})
    obs, rewards, terms, truncs, infos, _ = base.poll()
    assert rewards == {0: {"agent0": 1.0}, 1: {"agent0": 1.0}}
    assert terms[0]["__all__"] is False
    with pytest.raises(ValueError, match="all 2 sub-envs"):
        base.send_actions({0: {"agent0": 0}})
    reset_obs, _ = base.try_reset(1)
    assert reset_obs["agent0"].shape == (4,)
    with pytest.raises(NotImplementedError, match="remote_envs"):
        BaseEnv.to_base_env(TwoStepGame(), remote_envs=True)
    with pytest.raises(ValueError, match="make_env"):
        BaseEnv.to_base_env(gym.make("CartPole-v1"), remote_envs=True)
    assert BaseEnv.to_base_env(base) is base


def test_multi_agent_env_to_base_env() -> None:
    base = BaseEnv.to_base_env(TwoStepGame(), lambda i: TwoStepGame(), 2)
    obs, *_ = base.poll()
    assert obs == {0: {"a": 0, "b": 0}, 1: {"a": 0, "b": 0}}
    base.send_actions({1: {"a": 1, "b": 0}})
    obs, rewards, terms, _, _, _ = base.poll()
    assert set(obs) == {1} and rewards[1] == {"a": 1.0, "b": 0.0}
    assert terms[1]["__all__"] is False
    base.send_actions({1: {"a": 1, "b": 1}})
    assert base.poll()[2][1]["__all__"] is True
    assert base.try_reset(1) == ({"a": 0, "b": 0}, {})
    with pytest.raises(ValueError, match="make_env"):
        BaseEnv.to_base_env(TwoStepGame(), num_envs=2)


class BitMatchBase(BaseEnv):
    """A user's poll-driven env: ``num_envs`` games, one agent each; each step shows a
    random bit; reward 1 for acting it; 10 steps (random play: 5). Only the
    sub-envs that got actions answer the next poll."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any]) -> None:
        self.num_envs = 3
        self.rng = np.random.default_rng(0)
        self.bits = self.rng.integers(2, size=3)
        self.t = np.zeros(3, dtype=np.int64)
        self.ready: dict[int, Any] = {i: (self._obs(i), None, False) for i in range(3)}

    def _obs(self, i: int) -> dict[str, np.ndarray]:
        self.bits[i] = self.rng.integers(2)
        return {"agent0": np.array([self.bits[i]], np.float32)}

    def poll(self) -> Any:
        ready, self.ready = self.ready, {}
        obs = {i: o for i, (o, _, _) in ready.items()}
        rewards = {i: {} if r is None else {"agent0": r} for i, (_, r, _) in ready.items()}
        truncs = {i: {"__all__": d} for i, (_, _, d) in ready.items()}
        terms = {i: {"__all__": False} for i in ready}
        return obs, rewards, terms, truncs, {i: {} for i in ready}, {}

    def send_actions(self, action_dict: dict[Any, dict[Any, Any]]) -> None:
        for i, actions in action_dict.items():
            reward = float(int(actions["agent0"]) == self.bits[i])
            self.t[i] += 1
            self.ready[i] = (self._obs(i), reward, bool(self.t[i] >= 10))

    def try_reset(self, env_id: Any = None) -> Any:
        self.t[env_id] = 0
        return self._obs(env_id), {}


register_env("BitMatchBase", BitMatchBase)


def test_a_users_base_env_trains() -> None:
    config = {
        "num_workers": 0,
        "rollout_fragment_length": 50,
        "train_batch_size": 300,
        "batch_mode": "truncate_episodes",
        "lr": 0.02,
        "gamma": 0.5,
        "seed": 0,
        "model": {"fcnet_hiddens": [8]},
    }
    trainer = get_trainer_class("PG")(env="BitMatchBase", config=config)
    try:
        worker = trainer.workers.local_worker()
        assert worker.base_env is not None and len(worker.envs) == 3
        assert worker.sample().count == 150  # 50 steps of each of the 3 sub-envs
        for _ in range(30):
            result = trainer.train()
            if result["episode_reward_mean"] >= 9.0:
                break
    finally:
        trainer.stop()
    assert result["episode_reward_mean"] >= 9.0, result["episode_reward_mean"]
    assert result["episode_len_mean"] == 10
