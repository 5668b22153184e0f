"""`with_agent_groups`: two agents grouped into one with Tuple spaces.

In `SwapEnv` each agent sees a random bit and is rewarded for acting the *other*
agent's bit, so agents acting on their own observation score half on average
(10 of 20 per episode); grouped, one policy sees both bits and acts for both, and
reaches 20.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import MultiAgentEnv, register_env
from rayfield.rllib.env.group_agents_wrapper import INDIVIDUAL_REWARDS

BIT = gym.spaces.Discrete(2)
GROUP_OBS = gym.spaces.Tuple([BIT, BIT])
GROUP_ACT = gym.spaces.Tuple([BIT, BIT])


class SwapEnv(MultiAgentEnv):
    observation_space = BIT
    action_space = BIT

    def __init__(self, config: Any = None) -> None:
        self.rng = np.random.default_rng()

    def _obs(self) -> dict[str, int]:
        self.bits = {a: int(self.rng.integers(2)) for a in ("a", "b")}
        return dict(self.bits)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action_dict: dict[str, Any]) -> Any:
        other = {"a": "b", "b": "a"}
        rewards = {a: float(int(act) == self.bits[other[a]]) for a, act in action_dict.items()}
        self.t += 1
        done = self.t >= 10
        return self._obs(), rewards, {"__all__": done}, {"__all__": False}, {"a": {"t": self.t}}


register_env(
    "grouped_swap",
    lambda ctx: SwapEnv(ctx).with_agent_groups({"team": ["a", "b"]}, GROUP_OBS, GROUP_ACT),
)


def test_grouped_env_merges_observations_actions_and_rewards() -> None:
    env = SwapEnv().with_agent_groups({"team": ["a", "b"]}, GROUP_OBS, GROUP_ACT)
    assert env.observation_space == GROUP_OBS and env.action_space == GROUP_ACT
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"team"} and len(obs["team"]) == 2
    a_bit, b_bit = obs["team"]
    obs, rewards, terms, _, infos = env.step({"team": (b_bit, 1 - a_bit)})
    assert rewards == {"team": 1.0}
    assert infos["team"][INDIVIDUAL_REWARDS] == [1.0, 0.0]
    assert infos["team"]["group_info"] == [{"t": 1}, None]
    assert terms["__all__"] is False
    with pytest.raises(ValueError, match="has 1 parts"):
        env.step({"team": (0,)})
    with pytest.raises(ValueError, match="one group only"):
        SwapEnv().with_agent_groups({"x": ["a"], "y": ["a", "b"]})


def test_a_group_policy_learns_what_single_agents_cannot() -> None:
    config = {
        "num_workers": 0,
        "seed": 0,
        "gamma": 0.0,
        "num_envs_per_worker": 4,
        "rollout_fragment_length": 50,
        "train_batch_size": 400,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 5,
        "lr": 3e-3,
        "model": {"fcnet_hiddens": [32]},
        "multiagent": {
            "policies": {"team": (None, GROUP_OBS, GROUP_ACT, {})},
            "policy_mapping_fn": lambda agent_id: "team",
        },
    }
    trainer = get_trainer_class("PPO")(env="grouped_swap", config=config)
    try:
        for _ in range(30):
            result = trainer.train()
            if result["episode_reward_mean"] >= 18.0:
                break
        batch = trainer.workers.local_worker().sample().policy_batches["team"]
    finally:
        trainer.stop()
    assert result["episode_reward_mean"] >= 18.0, result["episode_reward_mean"]
    assert batch["actions"].shape[1:] == (2,)  # one joint action per step
    assert batch["obs"].shape[1:] == (4,)  # two one-hot bits
