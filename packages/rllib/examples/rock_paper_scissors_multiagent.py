"""The reference's rock-paper-scissors example: hand-coded policies next to a learned one.

    python rock_paper_scissors_multiagent.py --stop-reward 6

Two players play 10 rounds; each sees the other's last move (one-hot) and scores +1 for
a win, -1 for a loss. ``run_same_policy`` trains one PG policy for both players (a
stalemate, about 0 each); ``run_heuristic_vs_learned`` pits a learned PG policy against
a heuristic bound at random to each episode (`AlwaysSameHeuristic`: one random move all
episode, kept in the policy's recurrent state; `BeatLastHeuristic`: whatever beats the
opponent's last move) and trains only the learned one (``policies_to_train``) until its
mean return over the 10 rounds is ``stop_reward`` more than the heuristic's.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import numpy as np
from gymnasium.spaces import Discrete

from rayfield.rllib.agents.pg import PGTrainer
from rayfield.rllib.env import MultiAgentEnv, register_env
from rayfield.rllib.policy.policy import Policy

ROCK, PAPER, SCISSORS = 0, 1, 2
BEATS = {ROCK: PAPER, PAPER: SCISSORS, SCISSORS: ROCK}  # move -> the move that beats it


class RockPaperScissorsEnv(MultiAgentEnv):
    """Two players, ``player1`` and ``player2``, 10 rounds (RLlib 0.7's step API)."""

    def __init__(self, _config: Any = None) -> None:
        self.action_space = Discrete(3)
        self.observation_space = Discrete(3)
        self.player1, self.player2 = "player1", "player2"
        self.last_move: tuple[int, int] = (ROCK, ROCK)
        self.num_moves = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> dict[str, int]:
        self.last_move = (ROCK, ROCK)
        self.num_moves = 0
        return {self.player1: self.last_move[1], self.player2: self.last_move[0]}

    def step(self, action_dict: dict[str, int]) -> Any:
        move1, move2 = int(action_dict[self.player1]), int(action_dict[self.player2])
        self.last_move = (move1, move2)
        obs = {self.player1: move2, self.player2: move1}
        r1 = 0 if move1 == move2 else (1 if BEATS[move2] == move1 else -1)
        rew = {self.player1: float(r1), self.player2: float(-r1)}
        self.num_moves += 1
        done = {"__all__": self.num_moves >= 10}
        return obs, rew, done, {}


class _Heuristic(Policy):
    """A policy that never learns (nothing to train, no weights)."""

    def learn_on_batch(self, samples: Any) -> dict[str, Any]:
        return {}

    def get_weights(self) -> Any:
        return None

    def set_weights(self, weights: Any) -> None:
        pass


class AlwaysSameHeuristic(_Heuristic):
    """Picks a random move at the start of an episode and plays it throughout (the move
    is the policy's recurrent state)."""

    def get_initial_state(self) -> list[Any]:
        return [np.int64(random.choice([ROCK, PAPER, SCISSORS]))]

    def compute_actions(
        self, obs_batch: Any, state_batches: Any = None, *args: Any, **kw: Any
    ) -> Any:
        moves = np.asarray(state_batches[0]).astype(np.int64)
        return moves, [moves], {}


class BeatLastHeuristic(_Heuristic):
    """Plays the move that beats the opponent's last one (the one-hot observation)."""

    def compute_actions(
        self, obs_batch: Any, state_batches: Any = None, *args: Any, **kw: Any
    ) -> Any:
        last = np.argmax(np.asarray(obs_batch), axis=-1)
        return np.asarray([BEATS[int(m)] for m in last], dtype=np.int64), [], {}


register_env("RockPaperScissors", lambda config: RockPaperScissorsEnv(config))


def run_same_policy(iterations: int = 5) -> dict[str, Any]:
    """Both players act with one policy (and so learn nothing from each other)."""
    trainer = PGTrainer(env="RockPaperScissors", config={"num_workers": 0})
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = trainer.train()
            print(f"same policy: episode_reward_mean {result['episode_reward_mean']:.1f}")
        return result
    finally:
        trainer.stop()


def run_heuristic_vs_learned(stop_reward: float = 6.0, max_iterations: int = 100) -> dict[str, Any]:
    """Train "learned" against a random heuristic until it leads by `stop_reward`."""

    def select_policy(agent_id: str) -> str:
        if agent_id == "player1":
            return "learned"
        return random.choice(["always_same", "beat_last"])

    env = RockPaperScissorsEnv()
    trainer = PGTrainer(
        env="RockPaperScissors",
        config={
            "gamma": 0.0,
            "num_workers": 0,
            "num_envs_per_worker": 4,
            "rollout_fragment_length": 10,
            "train_batch_size": 200,
            "lr": 0.01,
            "multiagent": {
                "policies_to_train": ["learned"],
                "policies": {
                    "always_same": (
                        AlwaysSameHeuristic,
                        env.observation_space,
                        env.action_space,
                        {},
                    ),
                    "beat_last": (BeatLastHeuristic, env.observation_space, env.action_space, {}),
                    "learned": (None, env.observation_space, env.action_space, {}),
                },
                "policy_mapping_fn": select_policy,
            },
        },
    )
    try:
        result: dict[str, Any] = {}
        for _ in range(max_iterations):
            result = trainer.train()
            rewards = result["policy_reward_mean"]
            heuristic = [v for k, v in rewards.items() if k != "learned"]
            lead = rewards.get("learned", 0.0) - (sum(heuristic) / max(1, len(heuristic)))
            print(f"iteration {result['training_iteration']}: {rewards}, lead {lead:.1f}")
            result["lead"] = lead
            if lead >= stop_reward:
                break
        return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop-reward", type=float, default=6.0)
    parser.add_argument("--max-iterations", type=int, default=100)
    args = parser.parse_args()
    run_same_policy()
    run_heuristic_vs_learned(args.stop_reward, args.max_iterations)
