"""Config merging and checking: `deep_update`, `merge_dicts`, `check_config`.

An unknown top-level key is an error naming the closest valid key; a value whose
type does not fit the default's is an error naming the expected type.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable
from typing import Any


class UnknownConfigKeyError(KeyError, ValueError):
    """A config key the algorithm does not have."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


class ConfigTypeError(TypeError, ValueError):
    """A config value of the wrong type."""


def closest_key(key: str, valid: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return matches[0] if matches else None


def unknown_key_error(
    key: str, valid: Iterable[str], where: str = "config"
) -> UnknownConfigKeyError:
    hint = closest_key(key, valid)
    msg = f"unknown {where} key {key!r}"
    if hint:
        msg += f"; did you mean {hint!r}?"
    return UnknownConfigKeyError(msg)


def deep_update(
    original: dict[str, Any],
    new_dict: dict[str, Any],
    new_keys_allowed: bool = False,
    whitelist: Iterable[str] = (),
) -> dict[str, Any]:
    """Update `original` in place from `new_dict`, recursing into dicts.

    Args:
        original: the dict to update.
        new_dict: the updates.
        new_keys_allowed: allow keys `original` does not have.
        whitelist: top-level keys whose sub-dicts may gain new keys.

    Returns:
        `original`.

    Raises:
        UnknownConfigKeyError: a new key where none is allowed (names the closest key).
    """
    whitelist = set(whitelist)
    for k, value in new_dict.items():
        if k not in original and not new_keys_allowed:
            raise unknown_key_error(k, original)
        if isinstance(original.get(k), dict) and isinstance(value, dict):
            deep_update(original[k], value, k in whitelist or new_keys_allowed, ())
        else:
            original[k] = value
    return original


def merge_dicts(d1: dict[str, Any], d2: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `d1` updated from `d2` (new keys allowed)."""
    return deep_update(copy.deepcopy(d1), d2, True)


def check_types(
    config: dict[str, Any], defaults: dict[str, Any], loose: Iterable[str] = ()
) -> None:
    """Check each value against the type of its non-None default.

    Numbers accept ints and floats (not bools); lists accept tuples.

    Raises:
        ConfigTypeError: a value of another type (names the key and both types).
    """
    loose = set(loose)
    for k, default in defaults.items():
        if default is None or k in loose or k not in config:
            continue
        v = config[k]
        if isinstance(default, bool):
            ok = isinstance(v, bool)
        elif isinstance(default, (int, float)):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        elif isinstance(default, str):
            ok = isinstance(v, str)
        elif isinstance(default, dict):
            ok = isinstance(v, dict)
        elif isinstance(default, (list, tuple)):
            ok = isinstance(v, (list, tuple))
        else:
            ok = True
        if not ok:
            raise ConfigTypeError(
                f"config key {k!r} must be {type(default).__name__} like its default "
                f"{default!r}, got {type(v).__name__} {v!r}"
            )
