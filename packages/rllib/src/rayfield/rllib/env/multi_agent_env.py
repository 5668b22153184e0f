"""`MultiAgentEnv`: several agents acting in one environment.

``reset()`` returns ``({agent_id: obs}, {agent_id: info})`` and
``step({agent_id: action})`` returns ``(obs, rewards, terminateds, truncateds,
infos)``, each a dict keyed by agent id; only the agents present in ``obs`` act
next. ``terminateds["__all__"]`` / ``truncateds["__all__"]`` end the episode; an
agent whose own entry is True leaves it early. RLlib 0.7's forms are accepted
too: ``reset()`` returning only the observations and ``step`` returning
``(obs, rewards, dones, infos)`` with ``dones["__all__"]``.

:meth:`MultiAgentEnv.with_agent_groups` returns a :class:`GroupAgentsWrapper`, defined
here beside its base class (agent groups: see :mod:`rayfield.rllib.env.group_agents_wrapper`,
which exports it too).
"""

from __future__ import annotations

from typing import Any

ALL = "__all__"
INDIVIDUAL_REWARDS = "individual_rewards"
GROUP_INFO = "group_info"


class MultiAgentEnv:
    """Base class of multi-agent environments (see the module docstring).

    ``observation_space`` and ``action_space`` may stay None when every policy in
    ``multiagent.policies`` names its own spaces.
    """

    observation_space: Any = None
    action_space: Any = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        raise NotImplementedError

    def step(self, action_dict: dict[Any, Any]) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Release the env's resources (default: nothing)."""

    def with_agent_groups(
        self, groups: dict[Any, list[Any]], obs_space: Any = None, act_space: Any = None
    ) -> MultiAgentEnv:
        """This env with each group of agents acting as one agent with `Tuple`
        observations and actions (see `GroupAgentsWrapper`).

        Args:
            groups: ``{group_id: [agent_id, ...]}``.
            obs_space, act_space: the groups' spaces, or None.

        Raises:
            ValueError: an agent is in two groups or a group is empty.
        """
        return GroupAgentsWrapper(self, groups, obs_space, act_space)


def normalize_reset(out: Any) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """``(obs, infos)`` from either reset form.

    Raises:
        TypeError: the observations are not a dict keyed by agent id.
    """
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], dict):
        obs, infos = out
    else:
        obs, infos = out, {}
    if not isinstance(obs, dict):
        raise TypeError(
            f"a MultiAgentEnv's reset() must return {{agent_id: obs}}, got {type(obs).__name__}"
        )
    return obs, dict(infos or {})


def normalize_step(out: Any) -> tuple[dict, dict, dict, dict, dict]:
    """``(obs, rewards, terminateds, truncateds, infos)`` from either step form;
    both done dicts get an ``"__all__"`` entry.

    Raises:
        ValueError: the result has neither 4 nor 5 items, or no ``"__all__"`` flag.
    """
    if not isinstance(out, tuple) or len(out) not in (4, 5):
        raise ValueError(
            "a MultiAgentEnv's step() must return (obs, rewards, terminateds, truncateds, "
            "infos) or (obs, rewards, dones, infos), each a dict keyed by agent id"
        )
    if len(out) == 5:
        obs, rewards, terms, truncs, infos = out
    else:
        obs, rewards, terms, infos = out
        truncs = {}
    terms, truncs = dict(terms), dict(truncs)
    if ALL not in terms and ALL not in truncs:
        raise ValueError('a MultiAgentEnv must set dones["__all__"] (terminateds["__all__"])')
    terms.setdefault(ALL, False)
    truncs.setdefault(ALL, False)
    return obs, dict(rewards), terms, truncs, dict(infos or {})


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
