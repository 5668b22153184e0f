"""Ape-X DQN and Ape-X DDPG: they learn tasks whose best return is known, in the
one-process data flow (``num_workers: 0``) and with two rollout workers, two replay-shard
actors and the learner thread on a 2-CPU runtime; the wiring (per-worker exploration,
worker-side priorities, weight syncs, priority updates, metrics from the least exploring
worker, `collect_metrics` on remote workers). The tuned examples (CartPole-v1 to 450,
Pendulum-v1 to -200) run in ``nox -s learning``."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

import rayfield as rf
from rayfield.rllib.agents.ddpg.apex import ApexDDPGTrainer
from rayfield.rllib.agents.dqn.apex import ApexTrainer
from rayfield.rllib.agents.dqn.dqn import per_worker_epsilon
from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import register_env
from rayfield.rllib.evaluation import collect_metrics
from rayfield.testing import local_runtime

TUNED = Path(__file__).resolve().parents[2] / "tuned_examples"
STEPS = 10  # env steps per episode of the test tasks


class MatchTheLight(gym.Env):
    """Ten steps per episode: the observation is one-hot of a light c in {0, 1, 2},
    drawn anew each step; action c earns 1, the others 0 (best return 10, random 3.3)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), dtype=np.float32)
    action_space = gym.spaces.Discrete(3)

    def _obs(self) -> np.ndarray:
        self.light = int(self.np_random.integers(3))
        return np.eye(3, dtype=np.float32)[self.light]

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        reward = 1.0 if int(action) == self.light else 0.0
        self.t += 1
        return self._obs(), reward, False, self.t >= STEPS, {}


class FollowTheDial(gym.Env):
    """Ten steps per episode: the observation is a dial d in [-1, 1], drawn anew each
    step; the action a in [-1, 1] earns -(a - 0.8 d)^2 (best return 0, a uniform random
    policy about -4)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def _obs(self) -> np.ndarray:
        self.dial = float(self.np_random.uniform(-1.0, 1.0))
        return np.array([self.dial], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        reward = -float((np.asarray(action)[0] - 0.8 * self.dial) ** 2)
        self.t += 1
        return self._obs(), reward, False, self.t >= STEPS, {}


register_env("apex_match_the_light", lambda cfg: MatchTheLight())
register_env("apex_follow_the_dial", lambda cfg: FollowTheDial())

COMMON = {
    "optimizer": {"num_replay_buffer_shards": 2, "max_weight_sync_delay": 50},
    "n_step": 1,
    "gamma": 0.5,
    "buffer_size": 5000,
    "learning_starts": 200,
    "rollout_fragment_length": STEPS,
    "timesteps_per_iteration": 200,
    "min_iter_time_s": 0,
    "metrics_smoothing_episodes": 10,
    "seed": 0,
}
DQN = {
    **COMMON,
    "train_batch_size": 32,
    "lr": 3e-3,
    "model": {"fcnet_hiddens": [16]},
    "hiddens": [16],
    "target_network_update_freq": 500,
    "schedule_max_timesteps": 2000,
    "exploration_fraction": 0.5,
}
DDPG = {
    **COMMON,
    "train_batch_size": 64,
    "actor_hiddens": [16],
    "critic_hiddens": [16],
    "actor_lr": 3e-3,
    "critic_lr": 3e-3,
    "tau": 0.02,
    "target_network_update_freq": 0,
    "exploration_config": {"type": "GaussianNoise", "random_timesteps": 200, "stddev": 0.3},
}


def train_to(trainer: Any, target: float, max_steps: int) -> dict[str, Any]:
    while True:
        result = trainer.train()
        if result["episode_reward_mean"] >= target or result["timesteps_total"] >= max_steps:
            return result


@pytest.mark.parametrize(
    ("cls", "env", "config", "target"),
    [
        (ApexTrainer, "apex_match_the_light", DQN, 9.0),
        (ApexDDPGTrainer, "apex_follow_the_dial", DDPG, -0.5),
    ],
    ids=["APEX", "APEX_DDPG"],
)
def test_learns_in_one_process(cls: type, env: str, config: dict[str, Any], target: float) -> None:
    trainer = cls(env=env, config={**config, "num_workers": 0})
    try:
        result = train_to(trainer, target, 6000)
        assert result["episode_reward_mean"] >= target, result["timesteps_total"]
        # one learning step per sampled fragment once learning started
        trained = result["info"]["num_steps_trained"]
        assert 0 < trained <= result["timesteps_total"] // STEPS * config["train_batch_size"]
        assert trainer.optimizer.stats()["replay_shard_num_added"] == result["timesteps_total"]
    finally:
        trainer.stop()


@pytest.mark.parametrize(
    ("cls", "env", "config", "target"),
    [
        (ApexTrainer, "apex_match_the_light", DQN, 9.0),
        (ApexDDPGTrainer, "apex_follow_the_dial", DDPG, -0.5),
    ],
    ids=["APEX", "APEX_DDPG"],
)
def test_two_workers_two_shards_learn_on_two_cpus(
    cluster: Any, cls: type, env: str, config: dict[str, Any], target: float
) -> None:
    assert rf.cluster_resources()["CPU"] == 2
    trainer = cls(env=env, config={**config, "num_workers": 2})
    try:
        opt = trainer.optimizer
        remote = trainer.workers.remote_workers()
        assert len(opt.replay_actors) == 2 and opt.learner.is_alive()
        assert opt.metrics_workers == remote[1:]  # the least exploring third: worker 2
        result = train_to(trainer, target, 20_000)
        assert result["episode_reward_mean"] >= target, result["timesteps_total"]
        # every sampled row reached a shard (a shard's calls run in the order made)
        stats = opt.stats()
        assert stats["replay_shard_num_added"] == result["timesteps_total"]
        assert stats["replay_shard_num_sampled"] >= result["info"]["num_steps_trained"] > 0
        assert stats["num_weight_syncs"] >= 2
        shards = opt.shard_stats()
        assert all(s["num_added"] > 0 and s["num_priority_updates"] > 0 for s in shards)
        # fixed per-worker exploration, refreshed weights
        if cls is ApexTrainer:
            eps = rf.get([w.apply.remote(lambda w: w.policy.cur_epsilon) for w in remote])
            assert eps == pytest.approx([per_worker_epsilon(1, 2), per_worker_epsilon(2, 2)])
        else:
            scales = rf.get([w.apply.remote(lambda w: w.policy.noise.scale(10**9)) for w in remote])
            assert scales == pytest.approx([0.4, 0.4**8])
        # worker-side priorities: the rows a worker samples carry them
        batch = rf.get(remote[0].sample.remote())
        assert "priorities" in batch and np.all(batch["priorities"] > 0)
        # public metrics helper on the remote workers (the batch above ended an episode)
        metrics = collect_metrics(trainer.workers.local_worker(), remote, timeout_seconds=60)
        assert metrics["episodes_this_iter"] >= 1
        assert metrics["num_metric_batches_dropped"] == 0
    finally:
        trainer.stop()
    assert not trainer.optimizer.learner.is_alive()


def test_a_recreated_worker_takes_over_reporting(cluster: Any) -> None:
    config = {**DQN, "num_workers": 2, "recreate_failed_workers": True}
    trainer = ApexTrainer(env="apex_match_the_light", config=config)
    try:
        trainer.train()
        opt = trainer.optimizer
        old = trainer.workers.remote_workers()[1]
        assert opt.metrics_workers == [old]
        rf.kill(old)
        for _ in range(50):
            trainer.train()
            if trainer.workers.num_recreated:
                break
        new = trainer.workers.remote_workers()[1]
        assert new != old and opt.metrics_workers == [new]
        # the new worker's episodes are reported
        assert any(trainer.train()["episodes_this_iter"] for _ in range(20))
        eps = rf.get(new.apply.remote(lambda w: w.policy.cur_epsilon))
        assert eps == pytest.approx(per_worker_epsilon(2, 2))
    finally:
        trainer.stop()


def test_checkpoint_restores_weights_counters_and_ray2_builders(tmp_path: Path) -> None:
    from rayfield.rllib.algorithms.apex_ddpg import ApexDDPGConfig
    from rayfield.rllib.algorithms.apex_dqn import ApexDQNConfig

    config = {**DQN, "num_workers": 0, "learning_starts": 50, "timesteps_per_iteration": 100}
    trainer = ApexTrainer(env="apex_match_the_light", config=config)
    trainer.train()
    trainer.train()
    path = trainer.save(str(tmp_path / "apex"))
    obs = np.eye(3, dtype=np.float32)
    actions = [trainer.compute_action(o, explore=False) for o in obs]
    steps = trainer.optimizer.num_steps_trained
    trainer.stop()
    again = ApexTrainer.from_checkpoint(path)
    try:
        assert [again.compute_action(o, explore=False) for o in obs] == actions
        assert again.optimizer.num_steps_trained == steps > 0
        assert again.iteration == 2
    finally:
        again.stop()
    cfg = ApexDQNConfig().training(train_batch_size=64).to_dict()
    assert cfg["train_batch_size"] == 64 and cfg["optimizer"]["num_replay_buffer_shards"] == 4
    assert ApexDDPGConfig().to_dict()["worker_side_prioritization"] is True


def load(name: str) -> dict[str, Any]:
    (exp,) = yaml.safe_load((TUNED / f"{name}.yaml").read_text()).values()
    return exp  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("example", ["cartpole-apex", "pendulum-apex-ddpg"])
def test_tuned_example_reaches_its_return(example: str, tmp_path: Path) -> None:
    exp = load(example)
    target = exp["stop"]["episode_reward_mean"]
    budget = exp["stop"]["timesteps_total"]
    remote = exp["config"].get("num_workers", 0) > 0
    with local_runtime(temp_dir=tmp_path, num_cpus=2) if remote else contextlib.nullcontext():
        trainer = get_trainer_class(exp["run"])(env=exp["env"], config={**exp["config"], "seed": 1})
        try:
            result = train_to(trainer, target, budget)
        finally:
            trainer.stop()
    assert result["episode_reward_mean"] >= target, result["timesteps_total"]
