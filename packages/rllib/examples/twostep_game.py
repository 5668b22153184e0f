"""The two-step game of the QMIX paper, trained with QMIX, VDN or independent
Q-learners (``--mixer none``) on both agents grouped into one.

The env (`rayfield.rllib.env.twostep_game.TwoStepGame`) is registered here under the
reference example's name, ``grouped_twostep``, as ``with_agent_groups`` of the two
agents with Tuple spaces (rayfield-rllib also knows that name without registering).

    python twostep_game.py --mixer qmix --stop 20000   # reaches 8, the optimal return
    python twostep_game.py --mixer none                # independent learners: 7
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym

from rayfield.rllib.agents.qmix import QMixTrainer
from rayfield.rllib.env import register_env
from rayfield.rllib.env.twostep_game import TwoStepGame


def make_grouped(env_config: Any) -> Any:
    env = TwoStepGame(env_config)
    grouping = {"group_1": ["agent_1", "agent_2"]}
    obs_space = gym.spaces.Tuple([env.observation_space, env.observation_space])
    act_space = gym.spaces.Tuple([env.action_space, env.action_space])
    return env.with_agent_groups(grouping, obs_space=obs_space, act_space=act_space)


register_env("grouped_twostep", make_grouped)


def main(stop: int = 20000, mixer: str | None = "qmix") -> dict[str, Any]:
    """Train until the mean return of the last 100 episodes is 8 or `stop` env steps."""
    trainer = QMixTrainer(
        env="grouped_twostep",
        config={
            "mixer": mixer,
            "num_workers": 0,
            "rollout_fragment_length": 4,
            "train_batch_size": 32,
            "exploration_fraction": 0.1,
            "schedule_max_timesteps": 20000,
            "exploration_final_eps": 0.0,
            "learning_starts": 500,
            "target_network_update_freq": 200,
            "timesteps_per_iteration": 500,
            "min_iter_time_s": 0,
        },
    )
    try:
        while True:
            result = trainer.train()
            print(
                f"steps {result['timesteps_total']} mean return {result['episode_reward_mean']:.2f}"
            )
            if result["episode_reward_mean"] >= 8.0 or result["timesteps_total"] >= stop:
                return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--stop", type=int, default=20000, help="env steps at most")
    parser.add_argument("--mixer", choices=["qmix", "vdn", "none"], default="qmix")
    args = parser.parse_args()
    main(args.stop, None if args.mixer == "none" else args.mixer)
