"""Learning checks for the vision network and the LSTM wrapper, on small envs that
need them: `PixelSide` (which half of an image holds a square) and `RepeatPrevious`
(act the observation of the step before, which a feed-forward policy can only
guess: expected return 9.5 of 19)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from click.testing import CliRunner

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import register_env
from rayfield.rllib.scripts import cli


class PixelSide(gym.Env):
    """A ``size x size x 1`` image with a bright square in its left or right half;
    reward 1 for action 0 (left) or 1 (right) matching the half. 10 steps."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.size = int((config or {}).get("size", 42))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.size, self.size, 1), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.rng = np.random.default_rng()

    def _obs(self) -> np.ndarray:
        img = np.zeros((self.size, self.size, 1), np.float32)
        q = self.size // 4
        y = int(self.rng.integers(0, self.size - q))
        x = (self.size // 2) * self.side + int(self.rng.integers(0, self.size // 2 - q))
        img[y : y + q, x : x + q] = 1.0
        return img

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.side = int(self.rng.integers(2))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = 1.0 if int(action) == self.side else 0.0
        self.t += 1
        self.side = int(self.rng.integers(2))
        return self._obs(), reward, False, self.t >= 10, {}


class RepeatPrevious(gym.Env):
    """Observations are random bits; from the second step on, reward 1 when the
    action equals the observation of the step before. 20 steps (return <= 19)."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[int, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t, self.before, self.cur = 0, None, int(self.rng.integers(2))
        return self.cur, {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict]:
        reward = 1.0 if self.before is not None and int(action) == self.before else 0.0
        self.t += 1
        self.before, self.cur = self.cur, int(self.rng.integers(2))
        return self.cur, reward, False, self.t >= 20, {}


register_env("PixelSide", PixelSide)
register_env("RepeatPrevious", RepeatPrevious)


def train(run: str, env: str, config: dict[str, Any], target: float, max_steps: int) -> Any:
    trainer = get_trainer_class(run)(env=env, config=config)
    result: dict[str, Any] = {}
    while result.get("timesteps_total", 0) < max_steps:
        result = trainer.train()
        if result["episode_reward_mean"] >= target:
            break
    return trainer, result


PIXEL_PPO = {
    "num_workers": 0,
    "num_envs_per_worker": 8,
    "rollout_fragment_length": 25,
    "train_batch_size": 400,
    "sgd_minibatch_size": 100,
    "num_sgd_iter": 4,
    "lr": 1e-3,
    "gamma": 0.5,
    "vf_share_layers": True,
    "seed": 0,
}


def test_ppo_vision_network_learns_pixel_side() -> None:
    """20x20 images through two convolutions (the default 42x42 stack learns in the
    slow test); random play scores 5 of 10."""
    config = {
        **PIXEL_PPO,
        "env_config": {"size": 20},
        "model": {"conv_filters": [[8, [4, 4], 2], [16, [10, 10], 1]]},
    }
    trainer, result = train("PPO", "PixelSide", config, 8.5, 6400)
    trainer.stop()
    assert result["episode_reward_mean"] >= 8.5, result["episode_reward_mean"]


@pytest.mark.slow
def test_ppo_default_42x42_filters_learn_pixel_side() -> None:
    trainer, result = train("PPO", "PixelSide", PIXEL_PPO, 9.0, 4000)
    trainer.stop()
    assert result["episode_reward_mean"] >= 9.0, result["episode_reward_mean"]


@pytest.mark.slow
def test_dqn_vision_network_learns_pixel_side() -> None:
    config = {
        "num_workers": 0,
        "seed": 0,
        "learning_starts": 200,
        "timesteps_per_iteration": 200,
        "exploration_fraction": 0.2,
        "schedule_max_timesteps": 5000,
        "target_network_update_freq": 200,
        "lr": 1e-3,
        "gamma": 0.5,
        "train_batch_size": 32,
        "buffer_size": 5000,
        "env_config": {"size": 20},
        "model": {"conv_filters": [[8, [4, 4], 2], [16, [10, 10], 1]]},
    }
    trainer, result = train("DQN", "PixelSide", config, 9.0, 4000)
    trainer.stop()
    assert result["episode_reward_mean"] >= 9.0, result["episode_reward_mean"]


MEMORY = {
    "num_workers": 0,
    "num_envs_per_worker": 8,
    "rollout_fragment_length": 50,
    "train_batch_size": 800,
    "sgd_minibatch_size": 200,
    "num_sgd_iter": 8,
    "lr": 3e-3,
    "gamma": 0.5,
    "lambda": 0.95,
    "seed": 0,
}
LSTM_MODEL = {"fcnet_hiddens": [32], "use_lstm": True, "lstm_cell_size": 32, "max_seq_len": 10}


def play(trainer: Any, episodes: int) -> float:
    """Mean return of greedy episodes driven through `compute_action` with the
    recurrent state, previous action and previous reward passed in and out."""
    env = RepeatPrevious()
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=100 + i)
        state = trainer.get_policy().get_initial_state()
        prev_a, prev_r, total, done = 0, 0.0, 0.0, False
        while not done:
            action, state, _ = trainer.compute_action(
                obs, state, prev_action=prev_a, prev_reward=prev_r, explore=False
            )
            obs, prev_r, term, trunc, _ = env.step(action)
            prev_a, total, done = action, total + prev_r, term or trunc
        returns.append(total)
    return float(np.mean(returns))


def play_batched(trainer: Any, n: int) -> float:
    """Mean return of `n` greedy episodes played side by side through
    `compute_actions`, with the states of all of them in one call."""
    envs = [RepeatPrevious() for _ in range(n)]
    obs = {i: env.reset(seed=200 + i)[0] for i, env in enumerate(envs)}
    state: dict[int, list[Any]] = {}
    prev_a = dict.fromkeys(obs, 0)
    prev_r = dict.fromkeys(obs, 0.0)
    totals = dict.fromkeys(obs, 0.0)
    for _ in range(20):  # every episode lasts 20 steps
        actions, state, _ = trainer.compute_actions(
            obs, state, prev_action=prev_a, prev_reward=prev_r, explore=False
        )
        for i, env in enumerate(envs):
            obs[i], prev_r[i], _, _, _ = env.step(actions[i])
            prev_a[i] = actions[i]
            totals[i] += prev_r[i]
    return float(np.mean(list(totals.values())))


def test_ppo_lstm_learns_a_memory_task_a_feedforward_policy_cannot(tmp_path: Path) -> None:
    trainer, result = train("PPO", "RepeatPrevious", {**MEMORY, "model": LSTM_MODEL}, 17.0, 8000)
    try:
        assert result["episode_reward_mean"] >= 17.0, result["episode_reward_mean"]
        assert play(trainer, 5) >= 17.0
        assert play_batched(trainer, 4) >= 17.0
        assert len(trainer.get_policy().get_initial_state()) == 2
        checkpoint = str(trainer.save(str(tmp_path)))
    finally:
        trainer.stop()
    # `rllib rollout` carries the recurrent state from step to step
    res = CliRunner().invoke(
        cli, ["rollout", checkpoint, "--run", "PPO", "--episodes", "4", "--no-render"]
    )
    assert res.exit_code == 0, res.output
    mean = float(re.search(r"mean reward ([0-9.]+)", res.output).group(1))  # type: ignore[union-attr]
    assert mean >= 17.0, res.output
    ff, ff_result = train(
        "PPO", "RepeatPrevious", {**MEMORY, "model": {"fcnet_hiddens": [32]}}, 99, 4000
    )
    ff.stop()
    assert ff_result["episode_reward_mean"] < 12.0


@pytest.mark.parametrize("run", ["A2C", "PG"])
def test_a2c_and_pg_train_recurrent_models(run: str) -> None:
    config = {
        "num_workers": 0,
        "num_envs_per_worker": 8,
        "rollout_fragment_length": 20,
        "train_batch_size": 320,
        "lr": 3e-3,
        "gamma": 0.5,
        "seed": 0,
        "min_iter_time_s": 0,
        "model": LSTM_MODEL,
    }
    if run == "PG":
        config["batch_mode"] = "complete_episodes"
    trainer = get_trainer_class(run)(env="RepeatPrevious", config=config)
    try:
        before = trainer.get_policy().get_weights()
        result = trainer.train()
        after = trainer.get_policy().get_weights()
    finally:
        trainer.stop()
    assert result["timesteps_total"] >= 320
    assert np.isfinite(result["info"]["learner"]["default_policy"]["policy_loss"])
    lstm_keys = [k for k in before if k.startswith("lstm.")]
    assert lstm_keys and any(not np.allclose(before[k], after[k]) for k in lstm_keys)


@pytest.mark.slow
def test_a2c_lstm_learns_the_memory_task() -> None:
    config = {
        "num_workers": 0,
        "num_envs_per_worker": 16,
        "rollout_fragment_length": 20,
        "train_batch_size": 320,
        "lr": 3e-3,
        "gamma": 0.5,
        "entropy_coeff": 0.001,
        "seed": 0,
        "min_iter_time_s": 0,
        "model": LSTM_MODEL,
    }
    trainer, result = train("A2C", "RepeatPrevious", config, 16.0, 100_000)
    trainer.stop()
    assert result["episode_reward_mean"] >= 16.0, result["episode_reward_mean"]


def test_dqn_rejects_lstm() -> None:
    with pytest.raises(ValueError, match="use_lstm"):
        get_trainer_class("DQN")(env="RepeatPrevious", config={"model": {"use_lstm": True}})
