"""``remote_worker_envs``: each env of a rollout worker in its own actor, all of them
stepped at once."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import BaseEnv, register_env


class SlowCartPole(gym.Wrapper):
    """CartPole whose step takes `step_s` (a slow simulator) and reports its process,
    context and the time it spent in the step."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.ctx = ctx
        self.step_s = float(ctx.get("step_s", 0.0))

    def step(self, action: Any) -> Any:
        start = time.monotonic()
        if self.step_s:
            time.sleep(self.step_s)  # the simulator's own cost
        obs, r, term, trunc, info = self.env.step(action)
        info = {
            **info,
            "pid": os.getpid(),
            "remote": self.ctx.remote,
            "vector_index": self.ctx.vector_index,
            "span": (start, time.monotonic()),
        }
        return obs, r, term, trunc, info


register_env("slow_cartpole", lambda ctx: SlowCartPole(ctx))


def test_each_env_steps_in_its_own_actor_in_parallel(cluster: dict[str, Any]) -> None:
    config = {
        "num_workers": 0,
        "num_envs_per_worker": 2,
        "remote_worker_envs": True,
        "rollout_fragment_length": 10,
        "train_batch_size": 20,
        "sgd_minibatch_size": 20,
        "num_sgd_iter": 1,
        "env_config": {"step_s": 0.02},
        "model": {"fcnet_hiddens": [16]},
    }
    trainer = get_trainer_class("PPO")(env="slow_cartpole", config=config)
    try:
        worker = trainer.workers.local_worker()
        venv = worker.vector_env
        assert venv is not None and venv.num_envs == 2 and worker.envs == []
        venv.vector_reset()
        infos = []
        for _ in range(3):
            _, rewards, _, _, step_infos = venv.vector_step([0, 1])
            assert rewards == [1.0, 1.0]
            infos.append(step_infos)
        pids = {i["pid"] for i in infos[0]}
        assert len(pids) == 2 and os.getpid() not in pids
        assert all(i["remote"] for i in infos[0])
        assert sorted(i["vector_index"] for i in infos[0]) == [0, 1]
        for a, b in infos:  # the two envs' steps overlap in time: they run in parallel
            assert a["span"][0] < b["span"][1] and b["span"][0] < a["span"][1]
        before = trainer.get_policy().get_weights()
        result = trainer.train()
        after = trainer.get_policy().get_weights()
        assert result["timesteps_total"] >= 20
        assert any(not np.allclose(before[k], after[k]) for k in before)
    finally:
        trainer.stop()
    assert venv.actors == []  # stop() ended the env actors


def test_to_base_env_with_remote_envs(cluster: dict[str, Any]) -> None:
    base = BaseEnv.to_base_env(
        None, lambda i: gym.make("CartPole-v1"), num_envs=2, remote_envs=True
    )
    try:
        obs, *_ = base.poll()
        assert set(obs) == {0, 1} and obs[0]["agent0"].shape == (4,)
        base.send_actions({0: {"agent0": 0}, 1: {"agent0": 1}})
        _, rewards, *_ = base.poll()
        assert rewards == {0: {"agent0": 1.0}, 1: {"agent0": 1.0}}
    finally:
        base.vector_env.close()  # type: ignore[attr-defined]
