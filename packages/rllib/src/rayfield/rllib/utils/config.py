"""Config merging and checking: `deep_update`, `merge_dicts`, `check_types`,
`check_ranges`.

An unknown top-level key is an error naming the closest valid key; a value whose
type does not fit the default's is an error naming the expected type; a number
outside its range (`NumberRange`) is an error naming the key and the range.
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple


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


class NumberRange(NamedTuple):
    """The values a numeric config key takes: finite, ``low <= value <= high``.

    Attributes:
        low: the smallest value (None: no lower bound).
        high: the largest value (None: no upper bound).
        integer: only ints (not floats, not bools).
    """

    low: float | None = None
    high: float | None = None
    integer: bool = False

    def describe(self) -> str:
        """``an int >= 0``, ``a number in [0, 1]``..."""
        kind = "an int" if self.integer else "a finite number"
        if self.low is not None and self.high is not None:
            return f"{kind} in [{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"{kind} >= {self.low:g}"
        if self.high is not None:
            return f"{kind} <= {self.high:g}"
        return kind


def check_ranges(config: Mapping[str, Any], ranges: Mapping[str, NumberRange]) -> None:
    """Check every key of `ranges` that `config` has against its range.

    Raises:
        ConfigTypeError: a value that is not a number (or not an int where the range
            says so; a bool is neither); the message names the key and the range.
        ValueError: a number outside its range, NaN or infinite; the message names the
            key and the range.
    """
    for key, allowed in ranges.items():
        if key not in config:
            continue
        value = config[key]
        wanted = int if allowed.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted):
            raise ConfigTypeError(
                f"config key {key!r} must be {allowed.describe()}, got "
                f"{type(value).__name__} {value!r}"
            )
        if (
            not math.isfinite(value)
            or (allowed.low is not None and value < allowed.low)
            or (allowed.high is not None and value > allowed.high)
        ):
            raise ValueError(f"config key {key!r} must be {allowed.describe()}, got {value!r}")
