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
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.env.multi_agent_env import ALL, MultiAgentEnv, normalize_reset, normalize_step

INDIVIDUAL_REWARDS = "individual_rewards"
GROUP_INFO = "group_info"


class GroupAgentsWrapper(MultiAgentEnv):
    """`env` with the agents of `groups` merged (see the module docstring).

    Args:
        env: the multi-agent env.
        groups: ``{group_id: [agent_id, ...]}``; an agent may be in one group only.
        obs_space: the groups' observation space (a `Tuple`), or None.
        act_space: the groups' action space (a `Tuple`), or None.

    Raises:
        ValueError: an agent is in two groups, a group is empty, or a group id is
            also an agent id outside it.
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        groups: dict[Any, list[Any]],
        obs_space: Any = None,
        act_space: Any = None,
    ) -> None:
        self.env = env
        self.groups = {g: list(members) for g, members in groups.items()}
        self.agent_to_group: dict[Any, Any] = {}
        for g, members in self.groups.items():
            if not members:
                raise ValueError(f"agent group {g!r} has no members")
            for a in members:
                if a in self.agent_to_group:
                    raise ValueError(
                        f"agent {a!r} is in groups {self.agent_to_group[a]!r} and {g!r}: "
                        "an agent may be in one group only"
                    )
                self.agent_to_group[a] = g
        self.observation_space = obs_space
        self.action_space = act_space
        self._ended: set[Any] = set()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        obs, infos = normalize_reset(self.env.reset(seed=seed, options=options))
        self._ended = set()
        return self._group(obs), self._group_infos(infos, {})

    def step(self, action_dict: dict[Any, Any]) -> Any:
        actions: dict[Any, Any] = {}
        for aid, action in action_dict.items():
            members = self.groups.get(aid)
            if members is None:
                actions[aid] = action
                continue
            parts = list(action)
            if len(parts) != len(members):
                raise ValueError(
                    f"group {aid!r} has {len(members)} members but its action has "
                    f"{len(parts)} parts: {action!r}"
                )
            for a, part in zip(members, parts):
                actions[a] = part
        obs, rewards, terms, truncs, infos = normalize_step(self.env.step(actions))
        out_rewards = {a: r for a, r in rewards.items() if a not in self.agent_to_group}
        for g, members in self.groups.items():
            if any(a in rewards for a in members):
                out_rewards[g] = float(sum(float(rewards.get(a) or 0.0) for a in members))
        return (
            self._group(obs),
            out_rewards,
            self._group_dones(terms),
            self._group_dones(truncs),
            self._group_infos(infos, rewards),
        )

    def _group(self, values: dict[Any, Any]) -> dict[Any, Any]:
        out = {a: v for a, v in values.items() if a not in self.agent_to_group}
        for g, members in self.groups.items():
            present = [a for a in members if a in values]
            if not present:
                continue
            if len(present) != len(members):
                missing = [a for a in members if a not in values]
                raise ValueError(
                    f"agents {missing} of group {g!r} gave no observation while {present} "
                    "did: the agents of a group must observe and act together"
                )
            out[g] = tuple(values[a] for a in members)
        return out

    def _group_dones(self, dones: dict[Any, Any]) -> dict[Any, Any]:
        out = {a: d for a, d in dones.items() if a not in self.agent_to_group}
        for a, d in dones.items():
            if a in self.agent_to_group and d:
                self._ended.add(a)
        for g, members in self.groups.items():
            if any(a in dones for a in members):
                out[g] = all(a in self._ended for a in members)
        out.setdefault(ALL, False)
        return out

    def _group_infos(self, infos: dict[Any, Any], rewards: dict[Any, Any]) -> dict[Any, Any]:
        out = {a: i for a, i in infos.items() if a not in self.agent_to_group}
        for g, members in self.groups.items():
            if any(a in infos or a in rewards for a in members):
                out[g] = {
                    INDIVIDUAL_REWARDS: [rewards.get(a) for a in members],
                    GROUP_INFO: [infos.get(a) for a in members],
                }
        return out

    def close(self) -> None:
        self.env.close()
