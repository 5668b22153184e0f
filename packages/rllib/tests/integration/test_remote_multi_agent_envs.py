"""``remote_worker_envs`` with a `MultiAgentEnv`: each sub-env in its own actor behind a
`RemoteMultiAgentEnv`, all of a step's sub-envs started before any is awaited."""

from __future__ import annotations

import os
import time
from typing import Any

from rayfield.rllib.agents.qmix import QMixTrainer
from rayfield.rllib.env import MultiAgentEnv, register_env
from rayfield.rllib.env.remote_vector_env import RemoteMultiAgentEnv
from rayfield.rllib.env.twostep_game import grouped_twostep


class SlowTwoStep(MultiAgentEnv):
    """The grouped two-step game whose first step takes `step_s` (a slow simulator; the
    later ones are quick, for training) and reports its process and its time span."""

    def __init__(self, ctx: Any) -> None:
        self.env = grouped_twostep({})
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.step_s = float(ctx.get("step_s", 0.0))
        self.spans: list[tuple[float, float]] = []

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.env.reset(seed=seed, options=options)

    def step(self, action_dict: dict[str, Any]) -> Any:
        start = time.monotonic()
        if not self.spans:
            time.sleep(self.step_s)  # the simulator's own cost
        obs, rew, terms, truncs, _ = self.env.step(action_dict)
        self.spans.append((start, time.monotonic()))
        info = {"group_1": {"pid": os.getpid(), "span": self.spans[-1]}}
        return obs, rew, terms, truncs, info


register_env("slow_twostep", SlowTwoStep)


def test_multi_agent_envs_step_in_their_own_actors_in_parallel(cluster: dict[str, Any]) -> None:
    config = {
        "num_workers": 0,
        "num_envs_per_worker": 2,
        "remote_worker_envs": True,
        "env_config": {"step_s": 0.5},
        "learning_starts": 8,
        "timesteps_per_iteration": 16,
        "min_iter_time_s": 0,
    }
    trainer = QMixTrainer(env="slow_twostep", config=config)
    try:
        worker = trainer.workers.local_worker()
        envs = worker.envs
        assert len(envs) == 2 and all(isinstance(e, RemoteMultiAgentEnv) for e in envs)
        for e in envs:
            e.reset()
        for e, act in zip(envs, ([0, 0], [1, 1])):
            e.send_step({"group_1": act})
        (_, rew_a, *_, info_a), (_, rew_b, *_, info_b) = (e.step({}) for e in envs)
        assert (rew_a, rew_b) == ({"group_1": 0.0}, {"group_1": 0.0})
        a, b = info_a["group_1"], info_b["group_1"]
        assert a["pid"] != b["pid"] and os.getpid() not in (a["pid"], b["pid"])
        # the two steps overlap in time: they ran in parallel
        assert a["span"][0] < b["span"][1] and b["span"][0] < a["span"][1]
        result = trainer.train()
        assert result["timesteps_total"] >= 16 and result["episodes_this_iter"] >= 8
        assert 0.0 <= result["episode_reward_mean"] <= 8.0
    finally:
        trainer.stop()
