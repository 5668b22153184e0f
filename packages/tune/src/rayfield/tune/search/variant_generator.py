"""Variant generation: turn a spec with grid axes and samplers into concrete variants.

A spec is walked for unresolved leaves (paths such as ``("config", "layers", 0)``): grid
axes (``{"grid_search": [...]}``), domains (``uniform`` ...), ``sample_from`` and the YAML
form ``{"eval": "expr"}``. The grid axes, sorted by path, are iterated as a cross product
with the first axis varying fastest; for each grid point the other leaves are sampled by
fixed-point iteration, so a ``sample_from`` may read values that another one resolves.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Iterator
from typing import Any

from rayfield.tune.search.sample import Categorical, Domain, Float, Integer, function, sample_from

__all__ = [
    "check_grids",
    "count_variants",
    "format_vars",
    "generate_variants",
    "resolve_once",
]

Path = tuple[Any, ...]
_MAX_PASSES = 20


class _RecursiveDependencyError(Exception):
    """A sample_from read a value that is not resolved yet (retried in the next pass)."""


class _Unresolved:
    """Stands in for a leaf that no pass has resolved yet."""


def _is_grid(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "grid_search" in value


def _is_eval(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("eval"), str)


def _is_sampled(value: Any) -> bool:
    return isinstance(value, Domain) or _is_eval(value)


def _walk(spec: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every unresolved leaf of ``spec`` with its path (grid and sampled ones)."""
    if _is_grid(spec) or _is_sampled(spec):
        yield path, spec
        return
    if isinstance(spec, dict):
        for key, value in spec.items():
            yield from _walk(value, (*path, key))
    elif isinstance(spec, list):
        for index, value in enumerate(spec):
            yield from _walk(value, (*path, index))


def _get(spec: Any, path: Path) -> Any:
    for key in path:
        spec = spec[key]
    return spec


def _set(spec: Any, path: Path, value: Any) -> None:
    for key in path[:-1]:
        spec = spec[key]
    spec[path[-1]] = value


class _Spec:
    """Attribute and item access over a partially resolved spec (``spec.config.alpha``).

    Reading a leaf that is still unresolved raises ``_RecursiveDependencyError``.
    """

    def __init__(self, data: Any) -> None:
        self._data = data

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, _Unresolved) or _is_grid(value) or _is_sampled(value):
            raise _RecursiveDependencyError
        return _Spec(value) if isinstance(value, (dict, list)) else value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._wrap(self._data[name])
        except (KeyError, TypeError):
            raise AttributeError(f"the spec has no key {name!r}") from None

    def __getitem__(self, key: Any) -> Any:
        return self._wrap(self._data[key])

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def get(self, key: Any, default: Any = None) -> Any:
        return self._wrap(self._data[key]) if key in self._data else default

    def __len__(self) -> int:
        return len(self._data)


def _sample(value: Any, spec: Any, rng: random.Random) -> Any:
    guard = _Spec(spec)
    try:
        if _is_eval(value):
            import math

            scope = {"spec": guard, "random": random, "math": math}
            try:
                import numpy as np

                scope["np"] = np
            except ImportError:
                pass
            return eval(value["eval"], scope)
        if isinstance(value, sample_from):
            return value.sample(guard, rng)
        return value.sample(guard, rng)
    except _RecursiveDependencyError:
        raise
    except Exception as exc:
        raise ValueError(
            f"Failed to evaluate {value!r}: {type(exc).__name__}: {exc}. "
            "Wrap a function value with tune.function() so that it is not evaluated."
        ) from exc


def _resolve_sampled(spec: Any, paths: list[Path], rng: random.Random) -> dict[Path, Any]:
    """Sample every leaf at ``paths`` in ``spec`` (in place) by fixed-point passes."""
    originals = {path: _get(spec, path) for path in paths}
    for path in paths:
        _set(spec, path, _Unresolved())
    resolved: dict[Path, Any] = {}
    for _ in range(_MAX_PASSES):
        progress = False
        for path in paths:
            if path in resolved:
                continue
            try:
                value = _sample(originals[path], spec, rng)
            except _RecursiveDependencyError:
                continue
            _set(spec, path, value)
            resolved[path] = value
            progress = True
        if len(resolved) == len(paths):
            return resolved
        if not progress:
            break
    missing = [path for path in paths if path not in resolved]
    raise ValueError(
        f"could not resolve {missing}: their sample_from functions depend on each other in a cycle"
    )


def check_grids(spec: Any) -> None:
    """Check that every grid axis of ``spec`` (at any depth) is a non-empty list.

    Raises:
        ValueError: an empty axis, named by its path (it would make no variant at all).
        TypeError: an axis that is not a list or tuple.
    """
    for path, value in _walk(spec):
        if not _is_grid(value):
            continue
        axis = value["grid_search"]
        where = ".".join(str(p) for p in path) or "the spec"
        if not isinstance(axis, (list, tuple)):
            raise TypeError(f"grid_search at {where} must be a list, got {type(axis).__name__}")
        if not axis:
            raise ValueError(
                f"grid_search at {where} has no values: an empty axis makes no trial at all"
            )
        for item in axis:
            check_grids(item)


_IMMUTABLE = (str, int, float, bool, type(None))


def _replaced_by_immutable(leaf: Any) -> bool:
    """Whether sampling ``leaf`` leaves it as it was and draws an immutable value (a
    ``Float`` or ``Integer``, or a ``Categorical`` of strings, numbers and None), so that
    a variant may share it until the sample replaces it (a mutable category is drawn
    from each variant's own copy, as the sample is that object)."""
    kind = type(leaf)
    if kind is Float or kind is Integer:
        return True
    return kind is Categorical and all(type(c) in _IMMUTABLE for c in leaf.categories)


def _variants(spec: Any, rng: random.Random) -> Iterator[tuple[dict[Path, Any], Any]]:
    leaves = list(_walk(spec))
    if not leaves:
        yield {}, spec
        return
    grid = sorted((p for p, v in leaves if _is_grid(v)), key=_path_key)
    if grid:
        check_grids(spec)
    sampled = [p for p, v in leaves if not _is_grid(v)]
    axes = [_get(spec, p)["grid_search"] for p in grid]
    # Leaves every variant replaces (grid axes, the built-in domains that draw immutable
    # values) are not copied: the copy of the spec keeps the originals until replaced.
    keep = {id(v): v for p, v in leaves if _is_grid(v) or _replaced_by_immutable(v)}
    # Without grid axes, and with only immutable draws, a variant has no leaves left.
    final_pass = not grid and len(keep) == len(leaves)
    # itertools.product varies the last axis fastest; reverse so the first varies fastest.
    for point in itertools.product(*reversed(axes)):
        variant = copy.deepcopy(spec, dict(keep))
        chosen: dict[Path, Any] = {}
        for path, value in zip(grid, reversed(point)):
            _set(variant, path, copy.deepcopy(value))
            chosen[path] = value
        chosen.update(_resolve_sampled(variant, sampled, rng))
        if final_pass:
            yield chosen, variant
            continue
        # A resolved value may itself hold grid axes or samplers: expand them too.
        for more, final in _variants(variant, rng):
            yield {**chosen, **more}, final


def _path_key(path: Path) -> tuple[str, ...]:
    return tuple(str(p) for p in path)


def generate_variants(
    spec: dict[str, Any], rng: random.Random | None = None
) -> Iterator[tuple[dict[Path, Any], dict[str, Any]]]:
    """Yield ``(resolved_vars, variant)`` for every grid point of ``spec``.

    Args:
        spec: a dict that may hold grid axes, domains, ``sample_from`` and ``{"eval"}``
            leaves at any depth, in dicts and lists. It is not modified.
        rng: the random source (default the ``random`` module's).

    Yields:
        The path -> value map of what was resolved, and the resolved deep copy.

    Raises:
        ValueError: a sampler raised, or samplers depend on each other in a cycle.
    """
    yield from _variants(spec, rng or random._inst)


def resolve_once(spec: dict[str, Any], rng: random.Random | None = None) -> dict[str, Any]:
    """One variant of ``spec`` with its grid axes sampled uniformly (for searchers)."""
    r = rng or random._inst
    spec = copy.deepcopy(spec)
    for path, value in _walk(spec):
        if _is_grid(value):
            _set(spec, path, r.choice(value["grid_search"]))
    return next(_variants(spec, r))[1]


def count_variants(spec: dict[str, Any]) -> int:
    """How many variants one pass over ``spec`` gives (the grid's size)."""
    count = 1
    for _, value in _walk(spec):
        if _is_grid(value):
            count *= len(value["grid_search"])
    return count


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.5}"
    elif isinstance(value, function):
        text = getattr(value.func, "__name__", "function")
    else:
        text = str(value)
    return text.replace("/", "_")


def format_vars(resolved: dict[Path, Any]) -> str:
    """``"lr=0.2,momentum=1"`` for the resolved vars (used in trial names and tags).

    Paths under ``run``, ``env`` and ``resources_per_trial`` are left out; each name is
    the path from its last string key on, joined by ``_`` (``layers_0``).
    """
    parts = []
    for path in sorted(resolved, key=_path_key):
        if path and path[0] in ("run", "env", "resources_per_trial"):
            continue
        last = max((i for i, p in enumerate(path) if isinstance(p, str)), default=0)
        name = "_".join(str(p) for p in path[last:])
        parts.append(f"{name}={_format_value(resolved[path])}")
    return ",".join(parts)
