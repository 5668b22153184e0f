"""Custom environments by name: ``register_env(name, creator)``.

The trainer resolves the env to a creator function on the driver
(`get_env_creator`) and sends that function to the rollout workers, so a name
registered in the driver works on every node. When rayfield-tune is installed,
names registered with ``rayfield.tune.register_env`` are found too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

_env_creators: dict[str, Callable[[Any], Any]] = {}


def register_env(name: str, env_creator: Callable[[Any], Any]) -> None:
    """Register ``env_creator(env_config: EnvContext) -> env`` under `name`.

    Raises:
        TypeError: `env_creator` is not callable.
    """
    if not callable(env_creator):
        raise TypeError(f"register_env({name!r}, ...) needs a callable, got {env_creator!r}")
    _env_creators[name] = env_creator


def _tune_creator(name: str) -> Callable[[Any], Any] | None:
    try:
        tune_registry = importlib.import_module("rayfield.tune.registry")
    except ImportError:
        return None
    for getter in ("get_env_creator", "get_registered_env"):
        fn = getattr(tune_registry, getter, None)
        if fn is not None:
            try:
                creator = fn(name)
            except (KeyError, ValueError):
                return None
            return creator if callable(creator) else None
    return None


# Multi-agent example envs of the reference, known by name without register_env:
# name -> (module, creator function or env class).
BUILTIN_ENVS = {
    "TwoStepGame": ("rayfield.rllib.env.twostep_game", "TwoStepGame"),
    "grouped_twostep": ("rayfield.rllib.env.twostep_game", "grouped_twostep"),
}


def _builtin_creator(name: str) -> Callable[[Any], Any]:
    module, attr = BUILTIN_ENVS[name]
    return getattr(importlib.import_module(module), attr)


def get_env_creator(env: Any) -> Callable[[Any], Any]:
    """A creator ``f(env_context) -> env`` for a registered name, a name of
    `BUILTIN_ENVS` (``TwoStepGame``, ``grouped_twostep``), a gymnasium id or an env
    class (constructed with the env context).

    Raises:
        ValueError: `env` is neither a string nor a class.
    """
    if isinstance(env, type):
        cls = env
        return lambda ctx: cls(ctx)
    if not isinstance(env, str):
        raise ValueError(
            f"{env!r} is not a valid env: you can specify a custom env as either a class "
            "(constructed with the env_config) or a string (a gymnasium id or a name given "
            "to register_env)"
        )
    if env in _env_creators:
        return _env_creators[env]
    if env in BUILTIN_ENVS:
        return _builtin_creator(env)
    creator = _tune_creator(env)
    if creator is not None:
        return creator
    return _GymMaker(env)


class _GymMaker:
    """``gymnasium.make(env_id)``; an unknown id raises gymnasium's error when called."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, ctx: Any) -> Any:
        import gymnasium as gym

        try:
            return gym.make(self.env_id)
        except gym.error.Error as exc:
            from rayfield.rllib.env.atari_wrappers import register_atari_envs

            if register_atari_envs():  # ale-py's games register on request
                try:
                    return gym.make(self.env_id)
                except gym.error.Error:
                    pass
            raise ValueError(
                f"unknown env {self.env_id!r}: not registered with register_env and not a "
                f"gymnasium id ({exc}; Atari games need pip install rayfield-rllib[atari])"
            ) from exc
