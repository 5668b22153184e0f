"""`BaseEnv`: the lowest env interface, several multi-agent sub-envs behind one poll.

``poll()`` returns ``(obs, rewards, terminateds, truncateds, infos,
off_policy_actions)``, each a two-level dict ``{env_id: {agent_id: value}}`` over
the sub-envs that have something new; ``terminateds[env_id]["__all__"]`` ends a
sub-env's episode. ``send_actions({env_id: {agent_id: action}})`` steps them and
``try_reset(env_id)`` starts a new episode (returning its first observations, or
None when they will come through a later poll). `BaseEnv.to_base_env` converts
gymnasium envs and `VectorEnv` s (one agent, id ``"agent0"``) and `MultiAgentEnv` s.

A rollout worker whose env creator returns a `BaseEnv` samples it with the
multi-agent sampler, one sub-env at a time (`BaseEnvSubEnv`): actions for one
sub-env are sent, then the env is polled until that sub-env answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rayfield.rllib.env.multi_agent_env import ALL, MultiAgentEnv, normalize_reset, normalize_step
from rayfield.rllib.env.vector_env import VectorEnv

DUMMY_AGENT_ID = "agent0"


class BaseEnv:
    """Base class of poll-driven envs (see the module docstring).

    Attributes:
        observation_space, action_space: one agent's spaces (None when the policies
            name theirs).
        num_envs: how many sub-envs.
    """

    observation_space: Any = None
    action_space: Any = None
    num_envs: int = 1

    def poll(self) -> tuple[dict, dict, dict, dict, dict, dict]:
        raise NotImplementedError

    def send_actions(self, action_dict: dict[Any, dict[Any, Any]]) -> None:
        raise NotImplementedError

    def try_reset(self, env_id: Any = None) -> Any:
        """``({agent_id: obs}, {agent_id: info})`` of a new episode, or None."""
        return None

    def get_sub_environments(self) -> list[Any]:
        return []

    def stop(self) -> None:
        for env in self.get_sub_environments():
            close = getattr(env, "close", None)
            if close is not None:
                close()

    @staticmethod
    def to_base_env(
        env: Any,
        make_env: Callable[[int], Any] | None = None,
        num_envs: int = 1,
        remote_envs: bool = False,
        remote_env_batch_wait_ms: int = 0,
    ) -> BaseEnv:
        """Convert `env` (a `BaseEnv`, `VectorEnv`, `MultiAgentEnv` or gymnasium env)
        to a `BaseEnv` of `num_envs` sub-envs (more built with ``make_env(index)``).

        With ``remote_envs=True`` a gymnasium env's `num_envs` sub-envs are built by
        `make_env` in actors of their own (`RemoteVectorEnv`); `env` itself is not used.

        Raises:
            NotImplementedError: ``remote_envs=True`` for a `BaseEnv`, `VectorEnv` or
                `MultiAgentEnv`.
            ValueError: more sub-envs are needed and `make_env` is None.
        """
        if remote_envs and not isinstance(env, (BaseEnv, VectorEnv, MultiAgentEnv)):
            from rayfield.rllib.env.remote_vector_env import RemoteVectorEnv

            if make_env is None:
                raise ValueError("remote_envs=True needs make_env to build the envs in actors")
            return _VectorEnvToBaseEnv(
                RemoteVectorEnv(make_env, num_envs, remote_env_batch_wait_ms)
            )
        if remote_envs:
            raise NotImplementedError(
                "remote_envs (each sub-env in its own actor) supports gymnasium envs only, "
                f"not {type(env).__name__}"
            )
        if isinstance(env, BaseEnv):
            return env
        if isinstance(env, MultiAgentEnv):
            envs = [env]
            if num_envs > 1 and make_env is None:
                raise ValueError(f"num_envs={num_envs} needs make_env to build the other envs")
            envs += [make_env(i) for i in range(1, num_envs)]  # type: ignore[misc]
            return _MultiAgentEnvToBaseEnv(envs)
        if not isinstance(env, VectorEnv):
            env = VectorEnv.vectorize_gym_envs(make_env, [env], num_envs)
        return _VectorEnvToBaseEnv(env)


class _VectorEnvToBaseEnv(BaseEnv):
    """A `VectorEnv` as a `BaseEnv` whose sub-envs have one agent, ``"agent0"``."""

    def __init__(self, vector_env: VectorEnv) -> None:
        self.vector_env = vector_env
        self.observation_space = vector_env.observation_space
        self.action_space = vector_env.action_space
        self.num_envs = vector_env.num_envs
        obs, infos = vector_env.vector_reset()
        # {env_id: (obs, rewards, terminateds, truncateds, infos)}, each by agent id
        self._ready: dict[int, tuple[dict[str, Any], ...]] = {
            i: ({DUMMY_AGENT_ID: o}, {}, {ALL: False}, {ALL: False}, {DUMMY_AGENT_ID: info})
            for i, (o, info) in enumerate(zip(obs, infos))
        }

    def poll(self) -> tuple[dict, dict, dict, dict, dict, dict]:
        ready, self._ready = self._ready, {}
        parts: tuple[dict, ...] = ({}, {}, {}, {}, {})
        for env_id, values in ready.items():
            for part, value in zip(parts, values):
                part[env_id] = value
        return (*parts, {})  # type: ignore[return-value]

    def send_actions(self, action_dict: dict[Any, dict[Any, Any]]) -> None:
        # a VectorEnv steps all sub-envs together: the ones without an action repeat
        # nothing, so every sub-env must get one
        if set(action_dict) != set(range(self.num_envs)):
            raise ValueError(
                f"a vectorised env needs actions for all {self.num_envs} sub-envs at once, "
                f"got {sorted(action_dict)}"
            )
        actions = [action_dict[i][DUMMY_AGENT_ID] for i in range(self.num_envs)]
        obs, rewards, terms, truncs, infos = self.vector_env.vector_step(actions)
        for i in range(self.num_envs):
            a = DUMMY_AGENT_ID
            self._ready[i] = (
                {a: obs[i]},
                {a: rewards[i]},
                {a: bool(terms[i]), ALL: bool(terms[i])},
                {a: bool(truncs[i]), ALL: bool(truncs[i])},
                {a: infos[i]},
            )

    def try_reset(self, env_id: Any = None) -> Any:
        obs, info = self.vector_env.reset_at(int(env_id or 0))
        return {DUMMY_AGENT_ID: obs}, {DUMMY_AGENT_ID: info}

    def get_sub_environments(self) -> list[Any]:
        return self.vector_env.get_sub_environments()


class _MultiAgentEnvToBaseEnv(BaseEnv):
    """`MultiAgentEnv` s as a `BaseEnv`, stepped one after the other."""

    def __init__(self, envs: list[MultiAgentEnv]) -> None:
        self.envs = envs
        self.observation_space = getattr(envs[0], "observation_space", None)
        self.action_space = getattr(envs[0], "action_space", None)
        self.num_envs = len(envs)
        self._ready: dict[int, tuple] = {}
        for i, env in enumerate(envs):
            obs, infos = normalize_reset(env.reset())
            self._ready[i] = (obs, {}, {ALL: False}, {ALL: False}, infos)

    poll = _VectorEnvToBaseEnv.poll

    def send_actions(self, action_dict: dict[Any, dict[Any, Any]]) -> None:
        for env_id, actions in action_dict.items():
            self._ready[env_id] = normalize_step(self.envs[env_id].step(actions))

    def try_reset(self, env_id: Any = None) -> Any:
        return normalize_reset(self.envs[int(env_id or 0)].reset())

    def get_sub_environments(self) -> list[Any]:
        return list(self.envs)


class BaseEnvSubEnv(MultiAgentEnv):
    """One sub-env of a `BaseEnv` with the `MultiAgentEnv` interface, so the
    multi-agent sampler can step it (synchronously: send, then poll until it
    answers; answers of other sub-envs are kept for them).

    Args:
        base_env: the env.
        env_id: the sub-env's id.
        pending: ``{env_id: poll values}`` shared by the sub-envs of `base_env`.
    """

    def __init__(self, base_env: BaseEnv, env_id: Any, pending: dict[Any, tuple]) -> None:
        self.base_env = base_env
        self.env_id = env_id
        self.pending = pending
        self.observation_space = base_env.observation_space
        self.action_space = base_env.action_space
        self._started = False

    def _wait(self) -> tuple:
        for _ in range(10_000):
            if self.env_id in self.pending:
                return self.pending.pop(self.env_id)
            obs, rewards, terms, truncs, infos, _ = self.base_env.poll()
            for env_id, o in obs.items():
                self.pending[env_id] = (
                    o,
                    rewards.get(env_id, {}),
                    terms.get(env_id, {ALL: False}),
                    truncs.get(env_id, {ALL: False}),
                    infos.get(env_id, {}),
                )
        raise RuntimeError(f"BaseEnv sub-env {self.env_id!r} gave no observation in 10000 polls")

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        if not self._started:  # the first observations come through poll()
            self._started = True
            obs, _, _, _, infos = self._wait()
            return obs, infos
        out = self.base_env.try_reset(self.env_id)
        if out is None:
            obs, _, _, _, infos = self._wait()
            return obs, infos
        return out

    def step(self, action_dict: dict[Any, Any]) -> Any:
        self.base_env.send_actions({self.env_id: action_dict})
        obs, rewards, terms, truncs, infos = self._wait()
        terms = {ALL: False, **terms}
        return obs, rewards, terms, {ALL: False, **truncs}, infos
