"""Registered trainables and environments, looked up by name (``tune.run("my_fn")``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rayfield.tune.error import TuneError
from rayfield.tune.trainable import Trainable

__all__ = ["get_trainable_cls", "register_env", "register_trainable", "trainable_name"]

_TRAINABLES: dict[str, type[Trainable]] = {}
_ENVS: dict[str, Callable[..., Any]] = {}
_ENTRY_POINT_GROUP = "rayfield.tune.trainables"


def _as_trainable_cls(trainable: Any, name: str | None = None) -> type[Trainable]:
    from rayfield.tune.function_trainable import wrap_function

    if inspect.isclass(trainable):
        # A tune.Trainable as it is; another class implementing the contract
        # (TrainableProtocol) through the one adapter; else a TypeError naming what lacks.
        from rayfield.tune.contract import as_trainable

        return as_trainable(trainable)
    if callable(trainable):
        return wrap_function(trainable, name)
    raise TypeError(f"a trainable must be a function or a Trainable class, got {trainable!r}")


def register_trainable(name: str, trainable: Any) -> None:
    """Register a function or Trainable class under ``name``.

    Raises:
        TypeError: ``trainable`` is neither a function nor a Trainable subclass.
    """
    _TRAINABLES[name] = _as_trainable_cls(trainable, name)


def register_env(name: str, env_creator: Callable[..., Any]) -> None:
    """Register an environment creator ``env_creator(env_config) -> env`` (for RLlib).

    Raises:
        TypeError: ``env_creator`` is not callable.
    """
    if not callable(env_creator):
        raise TypeError(f"register_env() takes a function, got {type(env_creator).__name__}")
    _ENVS[name] = env_creator


def get_env_creator(name: str) -> Callable[..., Any] | None:
    return _ENVS.get(name)


def trainable_name(trainable: Any) -> str:
    """The name a trainable is registered under (its ``__name__``, or the string)."""
    if isinstance(trainable, str):
        return trainable
    name = getattr(trainable, "__name__", None) or type(trainable).__name__
    return "func" if name == "<lambda>" else str(name)


def get_trainable_cls(trainable: Any) -> type[Trainable]:
    """The Trainable class for a name, a function or a class (registering it).

    Raises:
        TuneError: an unknown name.
    """
    if isinstance(trainable, str):
        if trainable not in _TRAINABLES:
            _load_entry_points()
        if trainable not in _TRAINABLES:
            raise TuneError(
                f"unknown trainable {trainable!r}: register it with "
                f"tune.register_trainable({trainable!r}, ...) or pass the function or class"
            )
        return _TRAINABLES[trainable]
    # A function or class given directly replaces what its name pointed to before.
    cls = _as_trainable_cls(trainable, trainable_name(trainable))
    _TRAINABLES[trainable_name(trainable)] = cls
    return cls


def _load_entry_points() -> None:
    """Trainables other packages register (``rayfield.tune.trainables`` entry points)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=_ENTRY_POINT_GROUP):
        if ep.name not in _TRAINABLES:
            try:
                _TRAINABLES[ep.name] = _as_trainable_cls(ep.load(), ep.name)
            except Exception:  # a broken plugin must not break other names
                continue
