"""`VectorEnv`: a batch of ``num_envs`` sub-environments stepped together.

A rollout worker steps its envs through this interface: an env creator may return
a `VectorEnv` itself (its sub-envs are then the worker's envs, whatever
``num_envs_per_worker`` says), and gymnasium envs are wrapped with
`VectorEnv.vectorize_gym_envs` (``num_envs_per_worker`` copies). The methods
follow gymnasium's API per sub-env: resets give ``(obs, info)``, steps give
``(obs, reward, terminated, truncated, info)``, as lists over the sub-envs. A
sub-env that ends is not reset by `vector_step`; the caller calls `reset_at`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class VectorEnv:
    """Base class of vectorised envs.

    Args:
        observation_space: the space of one sub-env's observations.
        action_space: the space of one sub-env's actions.
        num_envs: how many sub-envs.
    """

    def __init__(self, observation_space: Any, action_space: Any, num_envs: int) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_envs = int(num_envs)

    @staticmethod
    def vectorize_gym_envs(
        make_env: Callable[[int], Any] | None = None,
        existing_envs: list[Any] | None = None,
        num_envs: int = 1,
        action_space: Any = None,
        observation_space: Any = None,
    ) -> VectorEnv:
        """A `VectorEnv` over gymnasium envs: `existing_envs`, completed to
        `num_envs` with ``make_env(index)``.

        Raises:
            ValueError: fewer than `num_envs` envs and no `make_env`, or `num_envs` < 1.
        """
        envs = list(existing_envs or [])
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if len(envs) < num_envs and make_env is None:
            raise ValueError(
                f"{len(envs)} envs given for num_envs={num_envs}: pass make_env to build the rest"
            )
        while len(envs) < num_envs:
            envs.append(make_env(len(envs)))  # type: ignore[misc]
        return _VectorizedGymEnv(envs, observation_space, action_space)

    # The RLlib 0.7 name.
    wrap = vectorize_gym_envs

    def vector_reset(
        self, *, seeds: list[int | None] | None = None, options: list[Any] | None = None
    ) -> tuple[list[Any], list[dict]]:
        """Reset every sub-env: ``(observations, infos)``, one per sub-env."""
        raise NotImplementedError

    def reset_at(
        self, index: int, *, seed: int | None = None, options: Any = None
    ) -> tuple[Any, dict]:
        """Reset sub-env `index`: ``(observation, info)``."""
        raise NotImplementedError

    def vector_step(
        self, actions: Any
    ) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        """Step every sub-env with its action (``actions[i]``):
        ``(observations, rewards, terminateds, truncateds, infos)``."""
        raise NotImplementedError

    def get_sub_environments(self) -> list[Any]:
        """The sub-envs, where they are Python objects (``[]`` otherwise)."""
        return []

    # The RLlib 0.7 name.
    def get_unwrapped(self) -> list[Any]:
        return self.get_sub_environments()

    def close(self) -> None:
        for env in self.get_sub_environments():
            close = getattr(env, "close", None)
            if close is not None:
                close()


class _VectorizedGymEnv(VectorEnv):
    """`VectorEnv` over a list of gymnasium envs, stepped one after the other."""

    def __init__(self, envs: list[Any], observation_space: Any, action_space: Any) -> None:
        super().__init__(
            observation_space or envs[0].observation_space,
            action_space or envs[0].action_space,
            len(envs),
        )
        self.envs = envs

    def vector_reset(
        self, *, seeds: list[int | None] | None = None, options: list[Any] | None = None
    ) -> tuple[list[Any], list[dict]]:
        seeds = seeds or [None] * self.num_envs
        options = options or [None] * self.num_envs
        obs, infos = [], []
        for i in range(self.num_envs):
            o, info = self.reset_at(i, seed=seeds[i], options=options[i])
            obs.append(o)
            infos.append(info)
        return obs, infos

    def reset_at(
        self, index: int, *, seed: int | None = None, options: Any = None
    ) -> tuple[Any, dict]:
        env = self.envs[index]
        if seed is not None:
            env.action_space.seed(seed)
        return env.reset(seed=seed, options=options)

    def vector_step(
        self, actions: Any
    ) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        obs, rewards, terms, truncs, infos = [], [], [], [], []
        for env, action in zip(self.envs, actions):
            o, r, term, trunc, info = env.step(action)
            obs.append(o)
            rewards.append(r)
            terms.append(term)
            truncs.append(trunc)
            infos.append(info)
        return obs, rewards, terms, truncs, infos

    def get_sub_environments(self) -> list[Any]:
        return self.envs
