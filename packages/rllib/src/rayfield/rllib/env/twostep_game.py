"""The two-step cooperative matrix game of the QMIX paper (Rashid et al. 2018, Fig. 3).

Two agents, two actions each. In the first state only agent 1's action matters: action
0 leads to state 2A, action 1 to state 2B; the reward is 0. In 2A every joint action
gets 7; in 2B the joint actions (0, 0), (0, 1)/(1, 0) and (1, 1) get 0, 1 and 8. The
episode then ends, so the optimal return is 8 (agent 1 picks 2B, both pick 1 there)
and the safe one 7. Each agent is rewarded half the team reward, so a group of both
(``with_agent_groups``) gets the team reward.

Each agent observes the state as a `Discrete(6)`: ``state`` for agent 1 and ``state +
3`` for agent 2 (their observations differ, so a network shared by both can still act
differently for each). With ``env_config={"separate_state_space": True}`` each agent
observes a `Dict` ``{"obs": Discrete(6), "state": Discrete(3)}`` whose ``state`` is the
global state given to QMIX's mixer.

Names: ``TwoStepGame`` (the two agents, ids ``"agent_1"``, ``"agent_2"``) and
``grouped_twostep`` (the two as one group, ``"group_1"``, with Tuple spaces: what QMIX
and VDN train on); both can be given as ``env`` without `register_env`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rayfield.rllib.env.multi_agent_env import MultiAgentEnv

# The reward of each joint action in state 2B; every joint action gets 7 in 2A.
PAYOFF_2B = ((0.0, 1.0), (1.0, 8.0))
PAYOFF_2A = 7.0
AGENTS = ("agent_1", "agent_2")
GROUP = "group_1"


class TwoStepGame(MultiAgentEnv):
    """The two-step game (see the module docstring).

    Args:
        env_config: ``{"separate_state_space": bool}`` (default False).
    """

    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config: Any = None) -> None:
        config = dict(env_config or {})
        self.with_state = bool(config.get("separate_state_space", False))
        if self.with_state:
            self.observation_space = gym.spaces.Dict(
                {"obs": gym.spaces.Discrete(6), "state": gym.spaces.Discrete(3)}
            )
        else:
            self.observation_space = gym.spaces.Discrete(6)
        self.state = 0

    def _obs(self) -> dict[str, Any]:
        if self.with_state:
            return {
                AGENTS[0]: {"obs": self.state, "state": self.state},
                AGENTS[1]: {"obs": self.state + 3, "state": self.state},
            }
        return {AGENTS[0]: self.state, AGENTS[1]: self.state + 3}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self.state = 0
        return self._obs(), {}

    def step(self, action_dict: dict[str, Any]) -> Any:
        """``{"agent_1": 0|1, "agent_2": 0|1}`` -> ``(obs, rewards, terminateds,
        truncateds, infos)``.

        Raises:
            ValueError: an agent's action is missing or not 0 or 1.
        """
        acts = []
        for agent in AGENTS:
            a = action_dict.get(agent)
            if a is None or int(a) not in (0, 1):
                raise ValueError(f"TwoStepGame needs an action 0 or 1 for {agent}, got {a!r}")
            acts.append(int(a))
        if self.state == 0:
            self.state = 1 if acts[0] == 0 else 2
            reward, done = 0.0, False
        elif self.state == 1:
            reward, done = PAYOFF_2A, True
        else:
            reward, done = PAYOFF_2B[acts[0]][acts[1]], True
        rewards = {a: reward / 2.0 for a in AGENTS}
        return self._obs(), rewards, {"__all__": done}, {"__all__": False}, {}


def grouped_twostep(env_config: Any = None) -> MultiAgentEnv:
    """`TwoStepGame` with both agents in the group ``"group_1"`` (Tuple observation and
    action spaces of the two agents')."""
    env = TwoStepGame(env_config)
    obs_space = gym.spaces.Tuple([env.observation_space, env.observation_space])
    act_space = gym.spaces.Tuple([env.action_space, env.action_space])
    return env.with_agent_groups({GROUP: list(AGENTS)}, obs_space=obs_space, act_space=act_space)
