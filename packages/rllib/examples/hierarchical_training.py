"""The reference's hierarchical training example: a two-level policy in a windy maze,
written as a multi-agent env.

    python hierarchical_training.py --flat         # one policy steps the maze
    python hierarchical_training.py                # high level picks goals, low level walks

`WindyMazeEnv`: an agent at a position facing north, east, south or west moves forward
or turns; a wind pushes it one cell sideways now and then; reaching the goal cell pays 1
and ends the episode (so do 200 steps). `HierarchicalWindyMazeEnv` is the same maze as a
multi-agent env of two kinds of agents: ``high_level_agent`` picks a direction to go;
each of its actions creates a new agent ``low_level_<k>`` that walks for up to 25 steps,
rewarded for each cell it gains in that direction; when it is done, the high level gets
the maze's reward collected meanwhile and picks the next direction. The low-level agents
pop into existence and leave, as the reference describes, and all of them share the
``low_level`` policy; ``high_level`` and ``low_level`` have their own discounting.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.spaces import Box, Discrete

from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.env import MultiAgentEnv, register_env

MAZE = [
    "#########",
    "#S      #",
    "####### #",
    "#       #",
    "# #######",
    "#      F#",
    "#########",
]
MOVES = [(0, -1), (1, 0), (0, 1), (-1, 0)]  # north, east, south, west as (dx, dy)
LOW_LEVEL_STEPS = 25


class WindyMazeEnv(Env):
    """The flat maze (see the module docstring). Actions: 0 forward, 1 turn left, 2 turn
    right. Observation: ``[x, y, facing]`` scaled to [0, 1]."""

    def __init__(self, env_config: Any = None) -> None:
        self.walls = {(x, y) for y, row in enumerate(MAZE) for x, c in enumerate(row) if c == "#"}
        self.start = next((r.index("S"), y) for y, r in enumerate(MAZE) if "S" in r)
        self.goal = next((r.index("F"), y) for y, r in enumerate(MAZE) if "F" in r)
        self.size = (len(MAZE[0]), len(MAZE))
        self.observation_space = Box(0.0, 1.0, (3,), np.float32)
        self.action_space = Discrete(3)
        self.rng = random.Random()
        self.pos, self.facing, self.t = self.start, 1, 0

    def obs(self) -> np.ndarray:
        w, h = self.size
        return np.array([self.pos[0] / w, self.pos[1] / h, self.facing / 3], np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self.rng = random.Random(seed)
        self.pos, self.facing, self.t = self.start, 1, 0
        return self.obs(), {}

    def _try_move(self, direction: int) -> None:
        dx, dy = MOVES[direction]
        nxt = (self.pos[0] + dx, self.pos[1] + dy)
        if nxt not in self.walls:
            self.pos = nxt

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if action == 0:
            self._try_move(self.facing)
        else:
            self.facing = (self.facing + (-1 if action == 1 else 1)) % 4
        if self.rng.random() < 0.1:  # the wind
            self._try_move((self.facing + self.rng.choice([-1, 1])) % 4)
        self.t += 1
        at_goal = self.pos == self.goal
        return self.obs(), float(at_goal), at_goal, self.t >= 200, {}


class HierarchicalWindyMazeEnv(MultiAgentEnv):
    """The maze with a high-level and short-lived low-level agents (module docstring)."""

    def __init__(self, env_config: Any = None) -> None:
        self.flat_env = WindyMazeEnv(env_config)
        self.num_low_level = 0
        self.low_id = ""
        self.goal_direction = 0
        self.steps_left = 0
        self.high_reward = 0.0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        obs, _ = self.flat_env.reset(seed=seed)
        self.high_reward = 0.0
        return {"high_level_agent": obs}, {}

    def low_obs(self, obs: np.ndarray) -> np.ndarray:
        onehot = np.eye(4, dtype=np.float32)[self.goal_direction]
        return np.concatenate([obs, onehot])

    def step(self, action_dict: dict[str, Any]) -> Any:
        if "high_level_agent" in action_dict:
            self.goal_direction = int(action_dict["high_level_agent"])
            self.num_low_level += 1
            self.low_id = f"low_level_{self.num_low_level}"
            self.steps_left = LOW_LEVEL_STEPS
            obs = self.low_obs(self.flat_env.obs())
            return (
                {self.low_id: obs},
                {self.low_id: 0.0},
                {"__all__": False},
                {"__all__": False},
                {},
            )
        before = self.flat_env.pos
        flat_obs, reward, term, trunc, _ = self.flat_env.step(int(action_dict[self.low_id]))
        self.high_reward += reward
        dx, dy = MOVES[self.goal_direction]
        gained = (self.flat_env.pos[0] - before[0]) * dx + (self.flat_env.pos[1] - before[1]) * dy
        low_reward = float(gained) - 0.01
        self.steps_left -= 1
        obs = {self.low_id: self.low_obs(flat_obs)}
        rewards = {self.low_id: low_reward}
        terms: dict[str, bool] = {"__all__": term}
        truncs: dict[str, bool] = {"__all__": trunc}
        if term or trunc or self.steps_left == 0:
            terms[self.low_id] = True
            obs["high_level_agent"] = flat_obs
            rewards["high_level_agent"] = self.high_reward
            self.high_reward = 0.0
        return obs, rewards, terms, truncs, {}


register_env("windy_maze", lambda config: WindyMazeEnv(config))
register_env("hierarchical_windy_maze", lambda config: HierarchicalWindyMazeEnv(config))


def make_trainer(flat: bool) -> PPOTrainer:
    common = {
        "num_workers": 0,
        "rollout_fragment_length": 200,
        "train_batch_size": 800,
        "sgd_minibatch_size": 200,
        "num_sgd_iter": 5,
        "entropy_coeff": 0.01,
    }
    if flat:
        return PPOTrainer(env="windy_maze", config=common)
    maze = WindyMazeEnv()

    def policy_mapping_fn(agent_id: str) -> str:
        return "low_level" if agent_id.startswith("low_level_") else "high_level"

    low_obs = Box(0.0, 1.0, (7,), np.float32)
    return PPOTrainer(
        env="hierarchical_windy_maze",
        config={
            **common,
            "multiagent": {
                "policies": {
                    "high_level": (None, maze.observation_space, Discrete(4), {"gamma": 0.9}),
                    "low_level": (None, low_obs, maze.action_space, {"gamma": 0.0}),
                },
                "policy_mapping_fn": policy_mapping_fn,
            },
        },
    )


def main(iterations: int = 20, flat: bool = False) -> dict[str, Any]:
    trainer = make_trainer(flat)
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = trainer.train()
            print(
                f"iteration {result['training_iteration']}: episode_reward_mean "
                f"{result['episode_reward_mean']:.2f}, by policy {result['policy_reward_mean']}",
                flush=True,
            )
        return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flat", action="store_true")
    parser.add_argument("--num-iters", type=int, default=20)
    args = parser.parse_args()
    main(args.num_iters, args.flat)
