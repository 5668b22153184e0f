"""`RemoteVectorEnv`: a worker's sub-envs, each in its own rayfield actor.

With ``remote_worker_envs: True`` a rollout worker builds its
``num_envs_per_worker`` envs as actors (``num_cpus=0``, so they do not take the
CPUs the workers asked for) and steps them through this `VectorEnv`: one
``step`` call goes to every actor at once and the worker waits for all of them,
so the sub-envs step in parallel while the policy still computes one batched
forward pass per step. It pays for envs whose step is slow next to an actor call
(a simulator, a game); for cheap envs such as CartPole the round trips cost more
than they save. `BaseEnv.to_base_env(..., remote_envs=True)` builds the same.

A `MultiAgentEnv` is put in actors the same way (`remote_multi_agent_envs`): each
sub-env is a `RemoteMultiAgentEnv` proxy whose ``send_step`` starts a step in its actor;
the multi-agent sampler sends every sub-env's actions before it awaits any step, so
those sub-envs step in parallel too.

``remote_env_batch_wait_ms`` is accepted; stepping always waits for every
sub-env (fully batched, synchronous stepping).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rayfield.rllib.env.multi_agent_env import MultiAgentEnv
from rayfield.rllib.env.vector_env import VectorEnv


class _EnvActor:
    """One sub-env in an actor: gymnasium's reset and step, called remotely."""

    def __init__(self, make_env: Callable[[int], Any], index: int) -> None:
        self.env = make_env(index)

    def spaces(self) -> tuple[Any, Any]:
        return self.env.observation_space, self.env.action_space

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        if seed is not None and hasattr(self.env.action_space, "seed"):
            self.env.action_space.seed(seed)
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        return self.env.step(action)

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


class RemoteVectorEnv(VectorEnv):
    """`num_envs` gymnasium envs, each built by ``make_env(index)`` in its own actor.

    Args:
        make_env: builds sub-env `index` (runs in the actor: must be picklable).
        num_envs: how many sub-envs.
        remote_env_batch_wait_ms: accepted for RLlib compatibility (see the module
            docstring).

    Raises:
        ValueError: `num_envs` < 1.
        RuntimeError: rayfield is not initialised (via the actor call).
    """

    def __init__(
        self, make_env: Callable[[int], Any], num_envs: int, remote_env_batch_wait_ms: int = 0
    ) -> None:
        import rayfield

        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        actor_cls = rayfield.remote(num_cpus=0)(_EnvActor)
        self.actors = [actor_cls.remote(make_env, i) for i in range(num_envs)]
        obs_space, act_space = rayfield.get(self.actors[0].spaces.remote())
        super().__init__(obs_space, act_space, num_envs)
        self.remote_env_batch_wait_ms = int(remote_env_batch_wait_ms)

    def vector_reset(
        self, *, seeds: list[int | None] | None = None, options: list[Any] | None = None
    ) -> tuple[list[Any], list[dict]]:
        import rayfield

        seeds = seeds or [None] * self.num_envs
        options = options or [None] * self.num_envs
        out = rayfield.get([a.reset.remote(s, o) for a, s, o in zip(self.actors, seeds, options)])
        return [o for o, _ in out], [info for _, info in out]

    def reset_at(
        self, index: int, *, seed: int | None = None, options: Any = None
    ) -> tuple[Any, dict]:
        import rayfield

        return rayfield.get(self.actors[index].reset.remote(seed, options))

    def vector_step(
        self, actions: Any
    ) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        import rayfield

        out = rayfield.get([a.step.remote(act) for a, act in zip(self.actors, actions)])
        obs, rewards, terms, truncs, infos = (list(col) for col in zip(*out))
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        """Close the sub-envs and end their actors."""
        import rayfield

        if not self.actors:
            return
        try:
            rayfield.get([a.close.remote() for a in self.actors])
        finally:
            for a in self.actors:
                try:
                    rayfield.kill(a)
                except Exception:  # already gone
                    pass
            self.actors = []


class RemoteMultiAgentEnv(MultiAgentEnv):
    """A `MultiAgentEnv` living in an actor (`_EnvActor`), seen through this proxy.

    ``step(action_dict)`` steps it and waits; ``send_step(action_dict)`` only starts the
    step, and the next ``step`` call returns that step's result (the multi-agent
    sampler sends every sub-env's actions first, then collects them one by one).
    ``observation_space`` / ``action_space`` are the remote env's.

    Args:
        actor: the `_EnvActor` handle.
        spaces: the remote env's ``(observation_space, action_space)``.
    """

    def __init__(self, actor: Any, spaces: tuple[Any, Any]) -> None:
        self.actor = actor
        self.observation_space, self.action_space = spaces
        self._pending: Any = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        import rayfield

        self._pending = None
        return rayfield.get(self.actor.reset.remote(seed, options))

    def send_step(self, action_dict: dict[Any, Any]) -> None:
        """Start a step in the actor (collected by the next `step`)."""
        self._pending = self.actor.step.remote(action_dict)

    def step(self, action_dict: dict[Any, Any]) -> Any:
        import rayfield

        ref = self._pending if self._pending is not None else self.actor.step.remote(action_dict)
        self._pending = None
        return rayfield.get(ref)

    def close(self) -> None:
        """Close the remote env and end its actor."""
        import rayfield

        try:
            rayfield.get(self.actor.close.remote())
        finally:
            try:
                rayfield.kill(self.actor)
            except Exception:  # already gone
                pass


def remote_multi_agent_envs(
    make_env: Callable[[int], Any], num_envs: int
) -> list[RemoteMultiAgentEnv]:
    """`num_envs` multi-agent envs, env `index` built by ``make_env(index)`` in its own
    actor (``num_cpus=0``), each behind a `RemoteMultiAgentEnv`.

    Raises:
        ValueError: `num_envs` < 1.
    """
    import rayfield

    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    actor_cls = rayfield.remote(num_cpus=0)(_EnvActor)
    actors = [actor_cls.remote(make_env, i) for i in range(num_envs)]
    spaces = rayfield.get([a.spaces.remote() for a in actors])
    return [RemoteMultiAgentEnv(a, sp) for a, sp in zip(actors, spaces)]
