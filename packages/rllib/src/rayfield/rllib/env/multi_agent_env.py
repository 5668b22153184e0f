"""`MultiAgentEnv`: several agents acting in one environment.

``reset()`` returns ``({agent_id: obs}, {agent_id: info})`` and
``step({agent_id: action})`` returns ``(obs, rewards, terminateds, truncateds,
infos)``, each a dict keyed by agent id; only the agents present in ``obs`` act
next. ``terminateds["__all__"]`` / ``truncateds["__all__"]`` end the episode; an
agent whose own entry is True leaves it early. RLlib 0.7's forms are accepted
too: ``reset()`` returning only the observations and ``step`` returning
``(obs, rewards, dones, infos)`` with ``dones["__all__"]``.
"""

from __future__ import annotations

from typing import Any

ALL = "__all__"


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
        observations and actions (see `rayfield.rllib.env.group_agents_wrapper`).

        Args:
            groups: ``{group_id: [agent_id, ...]}``.
            obs_space, act_space: the groups' spaces, or None.

        Raises:
            ValueError: an agent is in two groups or a group is empty.
        """
        from rayfield.rllib.env.group_agents_wrapper import GroupAgentsWrapper

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
