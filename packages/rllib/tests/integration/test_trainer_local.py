"""Trainers with the local worker only (no processes): results, checkpoints, actions."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rayfield.rllib.agents.dqn import DQNTrainer
from rayfield.rllib.agents.pg import PGTrainer
from rayfield.rllib.agents.ppo import PPOAgent, PPOTrainer
from rayfield.rllib.algorithms.algorithm import Algorithm
from rayfield.rllib.algorithms.callbacks import DefaultCallbacks
from rayfield.rllib.env import EnvContext, register_env

SMALL_PPO = {
    "num_workers": 0,
    "rollout_fragment_length": 50,
    "train_batch_size": 200,
    "sgd_minibatch_size": 50,
    "num_sgd_iter": 2,
    "model": {"fcnet_hiddens": [16]},
    "seed": 0,
}

RESULT_KEYS = {
    "episode_reward_mean",
    "episode_reward_max",
    "episode_reward_min",
    "episode_len_mean",
    "episodes_this_iter",
    "episodes_total",
    "timesteps_total",
    "timesteps_this_iter",
    "time_total_s",
    "time_this_iter_s",
    "training_iteration",
    "policy_reward_mean",
    "custom_metrics",
    "info",
    "num_healthy_workers",
}


def test_result_dict_and_learner_stats() -> None:
    trainer = PPOAgent(config=SMALL_PPO, env="CartPole-v1")
    try:
        r1 = trainer.train()
        r2 = trainer.train()
    finally:
        trainer.stop()
    assert set(r2) >= RESULT_KEYS
    assert r1["timesteps_total"] == 200 and r2["timesteps_total"] == 400
    assert r2["training_iteration"] == 2
    assert r2["episodes_total"] == r1["episodes_this_iter"] + r2["episodes_this_iter"] > 0
    assert 8 <= r2["episode_reward_mean"] <= 500
    stats = r2["info"]["learner"]["default_policy"]
    assert {
        "total_loss",
        "policy_loss",
        "vf_loss",
        "kl",
        "entropy",
        "cur_kl_coeff",
        "cur_lr",
        "vf_explained_var",
    } <= set(stats)
    assert r2["env_runners"]["episode_return_mean"] == r2["episode_reward_mean"]


def test_checkpoint_roundtrip_without_pickle(tmp_path: Path) -> None:
    trainer = PPOTrainer(config=SMALL_PPO, env="CartPole-v1")
    obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    try:
        trainer.train()
        path = trainer.save(str(tmp_path))
        action = trainer.compute_action(obs, explore=False)
        weights = trainer.get_weights()
        kl_coeff = trainer.get_policy().kl_coeff
    finally:
        trainer.stop()
    ckpt = Path(path).parent
    assert path.endswith("checkpoint_1/checkpoint-1")
    state = torch.load(ckpt / "policy_state.pt", weights_only=True)
    assert "model" in state["worker"]["policy"]
    meta = json.loads((ckpt / "algorithm_state.json").read_text())
    assert meta["algorithm"] == "PPO" and meta["config"]["train_batch_size"] == 200
    restored = PPOTrainer(config=SMALL_PPO, env="CartPole-v1")
    try:
        restored.restore(path)
        assert restored.iteration == 1
        assert restored.compute_action(obs, explore=False) == action
        for k, v in restored.get_weights()["default_policy"].items():
            assert np.array_equal(v, weights["default_policy"][k])
        assert restored.get_policy().kl_coeff == kl_coeff
    finally:
        restored.stop()
    again = Algorithm.from_checkpoint(path.checkpoint)
    try:
        assert isinstance(again, PPOTrainer) and again.config["train_batch_size"] == 200
        a, _state_out, extra = again.compute_single_action(obs, full_fetch=True, explore=False)
        assert a == action and "vf_preds" in extra
    finally:
        again.stop()


def test_same_seed_same_results() -> None:
    rewards = []
    for _ in range(2):
        trainer = PGTrainer(
            env="CartPole-v1",
            config={"seed": 3, "train_batch_size": 300, "model": {"fcnet_hiddens": [8]}},
        )
        try:
            r = trainer.train()
            rewards.append((r["episode_reward_mean"], r["episodes_this_iter"]))
        finally:
            trainer.stop()
    assert rewards[0] == rewards[1]


class CountingCallbacks(DefaultCallbacks):
    def on_episode_step(self, *, worker: Any, base_env: Any, episode: Any, **kw: Any) -> None:
        episode.user_data.setdefault("angles", []).append(abs(episode.last_observation_for()[2]))

    def on_episode_end(
        self, *, worker: Any, base_env: Any, policies: Any, episode: Any, **kw: Any
    ) -> None:
        episode.custom_metrics["pole_angle"] = float(np.mean(episode.user_data["angles"]))

    def on_train_result(self, *, result: dict[str, Any], **kw: Any) -> None:
        result["callback_ok"] = True


def test_callbacks_and_custom_metrics() -> None:
    trainer = PPOTrainer(env="CartPole-v1", config={**SMALL_PPO, "callbacks": CountingCallbacks})
    try:
        r = trainer.train()
    finally:
        trainer.stop()
    assert r["callback_ok"]
    assert {"pole_angle_mean", "pole_angle_min", "pole_angle_max"} <= set(r["custom_metrics"])
    assert 0 <= r["custom_metrics"]["pole_angle_mean"] < 0.3


def test_legacy_callback_dict() -> None:
    seen = []
    cbs = {"on_episode_end": lambda info: seen.append(info["episode"].length)}
    trainer = PPOTrainer(env="CartPole-v1", config={**SMALL_PPO, "callbacks": cbs})
    try:
        r = trainer.train()
    finally:
        trainer.stop()
    assert len(seen) == r["episodes_this_iter"] > 0


class Corridor(gym.Env):
    """Walk right to the end of a corridor; the length comes from env_config."""

    def __init__(self, config: EnvContext) -> None:
        self.length = config["corridor_length"]
        self.worker_index = config.worker_index
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0.0, self.length, (1,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.pos = 0
        return np.array([self.pos], dtype=np.float32), {}

    def step(self, action: int) -> Any:
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        done = self.pos >= self.length
        return np.array([self.pos], dtype=np.float32), 1.0 if done else -0.1, done, False, {}


def test_custom_env_class_and_registered_name() -> None:
    cfg = {**SMALL_PPO, "env_config": {"corridor_length": 3}, "horizon": 30}
    trainer = PPOTrainer(env=Corridor, config=cfg)
    try:
        r = trainer.train()
        assert trainer.workers.local_worker().env.length == 3
    finally:
        trainer.stop()
    assert r["episodes_this_iter"] > 0 and r["episode_len_mean"] <= 30
    register_env("corridor", lambda c: Corridor(c))
    trainer = PGTrainer(env="corridor", config={"env_config": {"corridor_length": 2}})
    try:
        assert trainer.train()["timesteps_total"] >= 200
    finally:
        trainer.stop()


def test_continuous_actions_and_mean_std_filter() -> None:
    cfg = {**SMALL_PPO, "observation_filter": "MeanStdFilter", "num_envs_per_worker": 2}
    trainer = PPOTrainer(env="Pendulum-v1", config=cfg)
    try:
        r = trainer.train()
        flt = trainer.workers.local_worker().filters["default_policy"]
        action = trainer.compute_action(np.zeros(3, dtype=np.float32))
    finally:
        trainer.stop()
    assert r["timesteps_total"] == 200
    assert flt.rs.n >= 200
    assert action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0


def test_complete_episodes_batch_mode() -> None:
    cfg = {**SMALL_PPO, "batch_mode": "complete_episodes"}
    trainer = PPOTrainer(env="CartPole-v1", config=cfg)
    try:
        worker = trainer.workers.local_worker()
        batch = worker.sample()
    finally:
        trainer.stop()
    assert batch.count >= 50
    assert batch["dones"][-1]
    for ep in batch.split_by_episode():
        assert ep["dones"][-1] and not ep["dones"][:-1].any()
        assert ep["t"].tolist() == list(range(ep.count))


def test_truncate_episodes_batch_size_and_bootstrap() -> None:
    trainer = PPOTrainer(env="CartPole-v1", config={**SMALL_PPO, "num_envs_per_worker": 3})
    try:
        batch = trainer.workers.local_worker().sample()
    finally:
        trainer.stop()
    assert batch.count == 150
    assert not math.isnan(float(batch["advantages"].sum()))


def test_dqn_trains_and_checkpoints(tmp_path: Path) -> None:
    cfg = {
        "learning_starts": 64,
        "timesteps_per_iteration": 200,
        "min_iter_time_s": 0,
        "model": {"fcnet_hiddens": [16]},
        "hiddens": [16],
        "n_step": 3,
        "seed": 0,
    }
    trainer = DQNTrainer(env="CartPole-v1", config=cfg)
    try:
        r = trainer.train()
        path = trainer.save(str(tmp_path))
    finally:
        trainer.stop()
    stats = r["info"]["learner"]["default_policy"]
    assert r["timesteps_total"] >= 200 and "mean_td_error" in stats and stats["cur_epsilon"] < 1
    again = Algorithm.from_checkpoint(path)
    try:
        assert isinstance(again, DQNTrainer) and again.iteration == 1
    finally:
        again.stop()


def test_bad_env() -> None:
    with pytest.raises(ValueError, match="class"):
        PPOTrainer(env=42, config=SMALL_PPO)
    with pytest.raises(ValueError, match="unknown env"):
        PPOTrainer(env="NoSuchEnv-v9", config=SMALL_PPO)


def test_evaluation_workers_and_export(tmp_path: Path) -> None:
    cfg = {
        **SMALL_PPO,
        "evaluation_interval": 1,
        "evaluation_num_episodes": 3,
        "evaluation_config": {"explore": False},
    }
    trainer = PPOTrainer(env="CartPole-v1", config=cfg)
    try:
        r = trainer.train()
        trainer.export_policy_model(str(tmp_path / "model"))
        trainer.export_policy_checkpoint(str(tmp_path / "ckpt"))
    finally:
        trainer.stop()
    ev = r["evaluation"]
    assert len(ev["hist_stats"]["episode_reward"]) == 3
    assert ev["episode_reward_mean"] >= 8
    state = torch.load(tmp_path / "model" / "model.pt", weights_only=True)
    assert any(k.endswith("weight") for k in state)
    assert (tmp_path / "ckpt" / "model.pt").exists()
    # exports are this user's alone: directories 0700, files 0600
    for path, mode in [
        (tmp_path / "model", 0o700),
        (tmp_path / "model" / "model.pt", 0o600),
        (tmp_path / "ckpt", 0o700),
        (tmp_path / "ckpt" / "model.pt", 0o600),
    ]:
        assert stat.S_IMODE(path.stat().st_mode) == mode, path


class TwoDialBandit(gym.Env):
    """One-step episodes; reward 1 for the action (1, 2) of MultiDiscrete([2, 3])."""

    def __init__(self, config: Any = None) -> None:
        self.action_space = gym.spaces.MultiDiscrete([2, 3])
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action: Any) -> Any:
        reward = 1.0 if tuple(int(a) for a in action) == (1, 2) else 0.0
        return np.zeros(1, dtype=np.float32), reward, True, False, {}


def test_multi_discrete_actions_learn() -> None:
    cfg = {**SMALL_PPO, "num_sgd_iter": 5, "lr": 1e-2, "metrics_smoothing_episodes": 200}
    trainer = PPOTrainer(env=TwoDialBandit, config=cfg)
    try:
        for _ in range(8):
            r = trainer.train()
        action = trainer.compute_action(np.zeros(1, dtype=np.float32), explore=False)
    finally:
        trainer.stop()
    assert r["episode_reward_mean"] > 0.6  # random play gets 1/6
    assert tuple(int(a) for a in action) == (1, 2)
