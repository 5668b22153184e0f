"""`Episode`: what callbacks see of one running episode, and `RolloutMetrics`,
what a worker reports when one ends."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

_ids = itertools.count()


@dataclass
class RolloutMetrics:
    """One finished episode: length (env steps), total reward, custom metrics and, for
    multi-agent envs, the reward of each ``(agent_id, policy_id)``."""

    episode_length: int
    episode_reward: float
    custom_metrics: dict[str, float] = field(default_factory=dict)
    agent_rewards: dict[Any, float] = field(default_factory=dict)


class Episode:
    """One episode in progress on one env of a rollout worker.

    Attributes:
        episode_id: a random 63-bit id. length: steps so far. total_reward: sum of
        the env's (unclipped) rewards. custom_metrics: scalars the callbacks set;
        the trainer reports their mean, min and max. user_data: scratch space for
        callbacks. env_index: the env's index in the worker.
    """

    def __init__(self, env_index: int = 0) -> None:
        self.episode_id = random.getrandbits(63) ^ next(_ids)
        self.env_index = env_index
        self.length = 0
        self.total_reward = 0.0
        self.custom_metrics: dict[str, float] = {}
        self.user_data: dict[str, Any] = {}
        self.hist_data: dict[str, list[float]] = {}
        self._last_obs: Any = None
        self._last_raw_obs: Any = None
        self._last_action: Any = None
        self._last_info: Any = None

    @property
    def agent_rewards(self) -> dict[tuple[str, str], float]:
        return {("agent0", "default_policy"): self.total_reward}

    def last_observation_for(self, agent_id: str = "agent0") -> Any:
        """The last preprocessed and filtered observation."""
        return self._last_obs

    def last_raw_obs_for(self, agent_id: str = "agent0") -> Any:
        return self._last_raw_obs

    def last_action_for(self, agent_id: str = "agent0") -> Any:
        return self._last_action

    def last_info_for(self, agent_id: str = "agent0") -> Any:
        return self._last_info

    def policy_for(self, agent_id: str = "agent0") -> str:
        return "default_policy"
