"""The reference's multi-agent CartPole: several CartPoles in one env, agents bound to
policies by a mapping function.

    python multiagent_cartpole.py --num-agents 4 --num-policies 2      # separate policies
    python multiagent_cartpole.py --num-agents 4 --num-policies 1      # one shared policy
    python multiagent_cartpole.py --num-agents 4 --num-policies 2 --share-weights

Each policy has settings of its own (gamma, network size); the mapping function binds
each agent to a random policy when it first appears. ``--share-weights`` gives every
policy a model whose first layer is one module shared by all of them (the reference's
"weight sharing between policies" example; torch modules instead of a TF variable scope).
The results report each policy's mean return (``policy_reward_mean``).
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.env import MultiAgentEnv, register_env
from rayfield.rllib.models import ModelCatalog
from rayfield.rllib.models.torch_models import TorchModelV2

SHARED_HIDDEN = 64
# The layer every policy's model uses when weights are shared (one module, one process).
SHARED_LAYER = nn.Sequential(nn.Linear(4, SHARED_HIDDEN), nn.Tanh())


class MultiCartPole(MultiAgentEnv):
    """``num_agents`` independent CartPoles; the episode ends when all are done."""

    def __init__(self, num_agents: int) -> None:
        self.agents = [gym.make("CartPole-v1") for _ in range(num_agents)]
        self.observation_space = self.agents[0].observation_space
        self.action_space = self.agents[0].action_space
        self.done: set[int] = set()

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.done = set()
        obs = {}
        for i, a in enumerate(self.agents):
            obs[i], _ = a.reset(seed=None if seed is None else seed + i)
        return obs, {}

    def step(self, action_dict: dict[int, Any]) -> Any:
        obs, rew, term, trunc = {}, {}, {}, {}
        for i, action in action_dict.items():
            obs[i], rew[i], term[i], trunc[i], _ = self.agents[i].step(action)
            if term[i] or trunc[i]:
                self.done.add(i)
        term["__all__"] = len(self.done) == len(self.agents)
        trunc["__all__"] = False
        return obs, rew, term, trunc, {}


class SharedLayerModel(TorchModelV2):
    """A policy/value model whose first layer is `SHARED_LAYER`, with heads of its own."""

    def __init__(
        self, obs_space: Any, action_space: Any, num_outputs: int, model_config: Any, name: str
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.shared = SHARED_LAYER
        self.pi = nn.Linear(SHARED_HIDDEN, num_outputs)
        self.vf = nn.Linear(SHARED_HIDDEN, 1)
        self._features: torch.Tensor | None = None

    def forward(self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any) -> Any:
        self._features = self.shared(input_dict["obs"].float())
        return self.pi(self._features), state

    def value_function(self) -> torch.Tensor:
        assert self._features is not None
        return self.vf(self._features).squeeze(-1)


def make_trainer(num_agents: int, num_policies: int, share_weights: bool = False) -> PPOTrainer:
    register_env("multi_cartpole", lambda _: MultiCartPole(num_agents))
    ModelCatalog.register_custom_model("shared_layer_model", SharedLayerModel)
    single = gym.make("CartPole-v1")
    obs_space, act_space = single.observation_space, single.action_space

    def gen_policy(i: int) -> tuple[Any, Any, Any, dict[str, Any]]:
        if share_weights:
            model = {"custom_model": "shared_layer_model"}
        else:
            model = {"fcnet_hiddens": [[32, 32], [64, 64]][i % 2]}
        return (None, obs_space, act_space, {"model": model, "gamma": random.choice([0.95, 0.99])})

    policies = {f"policy_{i}": gen_policy(i) for i in range(num_policies)}
    policy_ids = list(policies)
    return PPOTrainer(
        env="multi_cartpole",
        config={
            "num_workers": 0,
            "rollout_fragment_length": 100,
            "train_batch_size": 400,
            "sgd_minibatch_size": 100,
            "num_sgd_iter": 5,
            "multiagent": {
                "policies": policies,
                "policy_mapping_fn": lambda agent_id: random.choice(policy_ids),
            },
        },
    )


def main(
    iterations: int = 10, num_agents: int = 4, num_policies: int = 2, share_weights: bool = False
) -> dict[str, Any]:
    trainer = make_trainer(num_agents, num_policies, share_weights)
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = trainer.train()
            print(
                f"iteration {result['training_iteration']}: episode_reward_mean "
                f"{result['episode_reward_mean']:.1f}, by policy {result['policy_reward_mean']}",
                flush=True,
            )
        return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-agents", type=int, default=4)
    parser.add_argument("--num-policies", type=int, default=2)
    parser.add_argument("--num-iters", type=int, default=20)
    parser.add_argument("--share-weights", action="store_true")
    args = parser.parse_args()
    main(args.num_iters, args.num_agents, args.num_policies, args.share_weights)
