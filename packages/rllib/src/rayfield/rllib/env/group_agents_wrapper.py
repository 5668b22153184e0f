"""Agent groups: several agents of a `MultiAgentEnv` acting as one.

``env.with_agent_groups({"group_1": ["a", "b"]})`` returns a `GroupAgentsWrapper`
in which the agents of each group are one logical agent (id ``"group_1"``): its
observation is the tuple of its members' observations and its action the tuple of
their actions (split among them in the order the group lists them), its reward is
the sum of theirs, and its info is ``{"individual_rewards": [...], "group_info":
[...]}``. The group ends when all its members have ended. Agents in no group pass
through unchanged. A policy for a group takes `Tuple` observation and action
spaces (pass them as `obs_space` / `act_space`, or give them in the policy's
tuple); a Tuple of `Discrete` actions is sampled as a `MultiCategorical`. Algorithms
that model a team jointly (QMIX in the reference) need this.

The wrapper is defined in :mod:`rayfield.rllib.env.multi_agent_env`, beside the
``MultiAgentEnv`` it subclasses and whose ``with_agent_groups`` returns it.
"""

from __future__ import annotations

from rayfield.rllib.env.multi_agent_env import GROUP_INFO, INDIVIDUAL_REWARDS, GroupAgentsWrapper

__all__ = ["GROUP_INFO", "INDIVIDUAL_REWARDS", "GroupAgentsWrapper"]
