"""The reference's two-trainer example: PPO and DQN take turns training their own policy
in one multi-agent env.

    python multiagent_two_trainers.py --num-iters 20

Four CartPoles (``multiagent_cartpole.MultiCartPole``): even agents act with
``ppo_policy``, odd ones with ``dqn_policy``. Both trainers hold both policies, but
each trains only its own (``policies_to_train``); after every round of training, each
copies the other's freshly trained weights in, so both play with the latest of each.
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
from multiagent_cartpole import MultiCartPole

from rayfield.rllib.agents.dqn import DQNTrainer
from rayfield.rllib.agents.dqn.dqn import DQNTorchPolicy
from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.agents.ppo.ppo_torch_policy import PPOTorchPolicy
from rayfield.rllib.env import register_env


def policy_mapping_fn(agent_id: int) -> str:
    return "ppo_policy" if agent_id % 2 == 0 else "dqn_policy"


def make_trainers(num_agents: int = 4) -> tuple[PPOTrainer, DQNTrainer]:
    register_env("multi_cartpole", lambda _: MultiCartPole(num_agents))
    single = gym.make("CartPole-v1")
    obs_space, act_space = single.observation_space, single.action_space
    policies = {
        "ppo_policy": (PPOTorchPolicy, obs_space, act_space, {}),
        "dqn_policy": (DQNTorchPolicy, obs_space, act_space, {}),
    }
    ppo_trainer = PPOTrainer(
        env="multi_cartpole",
        config={
            "multiagent": {
                "policies": policies,
                "policy_mapping_fn": policy_mapping_fn,
                "policies_to_train": ["ppo_policy"],
            },
            "num_workers": 0,
            "observation_filter": "NoFilter",  # to compare with DQN, which has none
            "rollout_fragment_length": 100,
            "train_batch_size": 400,
            "sgd_minibatch_size": 100,
            "num_sgd_iter": 5,
        },
    )
    dqn_trainer = DQNTrainer(
        env="multi_cartpole",
        config={
            "multiagent": {
                "policies": policies,
                "policy_mapping_fn": policy_mapping_fn,
                "policies_to_train": ["dqn_policy"],
            },
            "num_workers": 0,
            "gamma": 0.95,
            "n_step": 3,
            "learning_starts": 200,
        },
    )
    return ppo_trainer, dqn_trainer


def train_round(ppo_trainer: PPOTrainer, dqn_trainer: DQNTrainer) -> dict[str, dict[str, Any]]:
    """One iteration of each trainer, then each takes the other's trained policy."""
    # improve the DQN policy, then the PPO policy (each trainer trains its own)
    results = {"DQN": dqn_trainer.train(), "PPO": ppo_trainer.train()}
    for name, result in results.items():
        print(f"{name}: by policy {result['policy_reward_mean']}", flush=True)
    # swap weights to synchronize
    dqn_trainer.set_weights(ppo_trainer.get_weights(["ppo_policy"]))
    ppo_trainer.set_weights(dqn_trainer.get_weights(["dqn_policy"]))
    return results


def main(iterations: int = 20, num_agents: int = 4) -> dict[str, dict[str, Any]]:
    ppo_trainer, dqn_trainer = make_trainers(num_agents)
    results: dict[str, dict[str, Any]] = {}
    try:
        for i in range(iterations):
            print(f"== iteration {i + 1} ==")
            results = train_round(ppo_trainer, dqn_trainer)
        return results
    finally:
        ppo_trainer.stop()
        dqn_trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-iters", type=int, default=20)
    parser.add_argument("--num-agents", type=int, default=4)
    args = parser.parse_args()
    main(args.num_iters, args.num_agents)
