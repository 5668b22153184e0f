"""Search-space primitives: distributions, ``grid_search``, ``sample_from``, ``function``.

A config is a nested dict (or list) whose leaves may be:

* ``grid_search(values)``: one axis of a grid; the variants are the cross product of all
  axes, repeated ``num_samples`` times;
* a :class:`Domain` (``uniform``, ``loguniform``, ``choice``, ``randint`` ...): sampled once
  per variant;
* ``sample_from(fn)``: ``fn(spec)`` is called once per variant; ``spec.config.x`` reads
  other resolved values of the same variant (conditional spaces);
* ``function(fn)``: a literal function, left as it is.
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from rayfield.tune.error import TuneError

__all__ = [
    "Categorical",
    "Domain",
    "Float",
    "Integer",
    "choice",
    "function",
    "grid_search",
    "lograndint",
    "loguniform",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "uniform",
]


class Domain:
    """A distribution of values for one config key; ``sample(spec, rng)`` draws one."""

    def sample(self, spec: Any = None, rng: random.Random | None = None) -> Any:
        raise NotImplementedError


def _rng(rng: random.Random | None) -> random.Random:
    return rng if rng is not None else random._inst


def _check_q(q: float) -> None:
    if not q > 0:
        raise ValueError(f"the quantization step q must be > 0, got {q}")


def _quantize(value: float, q: float | None, lower: float, upper: float) -> float:
    if q is None:
        return value
    value = round(value / q) * q
    # Stay inside the bounds after rounding.
    while value < lower:
        value += q
    while value > upper:
        value -= q
    return value


class Float(Domain):
    """A float between ``lower`` and ``upper``.

    Args:
        lower, upper: bounds, ``lower < upper`` (for ``"normal"``: mean and std).
        sampler: ``"uniform"``, ``"loguniform"`` (``base``) or ``"normal"``.
        q: when set, values are rounded to a multiple of ``q``.
    """

    def __init__(
        self,
        lower: float,
        upper: float,
        sampler: str = "uniform",
        q: float | None = None,
        base: float = 10.0,
    ) -> None:
        if sampler != "normal" and not lower < upper:
            raise ValueError(f"lower must be < upper, got lower={lower}, upper={upper}")
        if sampler == "loguniform" and lower <= 0:
            raise ValueError(f"loguniform needs lower > 0, got {lower}")
        if q is not None:
            _check_q(q)
        self.lower, self.upper, self.sampler, self.q, self.base = lower, upper, sampler, q, base

    def sample(self, spec: Any = None, rng: random.Random | None = None) -> float:
        r = _rng(rng)
        if self.sampler == "normal":
            value = r.gauss(self.lower, self.upper)
            return value if self.q is None else round(value / self.q) * self.q
        if self.sampler == "loguniform":
            log = math.log(self.base)
            value = math.exp(
                r.uniform(math.log(self.lower) / log, math.log(self.upper) / log) * log
            )
        else:
            value = r.uniform(self.lower, self.upper)
        return _quantize(value, self.q, self.lower, self.upper)

    def __repr__(self) -> str:
        return f"Float({self.lower}, {self.upper}, {self.sampler!r}, q={self.q})"


class Integer(Domain):
    """An int in ``[lower, upper)`` (upper excluded, as in Ray's ``randint``).

    Args:
        sampler: ``"uniform"`` or ``"loguniform"`` (``base``).
        q: when set, values are rounded to a multiple of ``q`` (``qrandint``: upper included).
    """

    def __init__(
        self,
        lower: int,
        upper: int,
        sampler: str = "uniform",
        q: int | None = None,
        base: float = 10.0,
    ) -> None:
        if not lower < upper:
            raise ValueError(f"lower must be < upper, got lower={lower}, upper={upper}")
        if sampler == "loguniform" and lower <= 0:
            raise ValueError(f"lograndint needs lower > 0, got {lower}")
        if q is not None:
            _check_q(q)
        self.lower, self.upper, self.sampler, self.q, self.base = lower, upper, sampler, q, base

    def sample(self, spec: Any = None, rng: random.Random | None = None) -> int:
        r = _rng(rng)
        if self.q is not None:
            value = r.uniform(self.lower, self.upper)
            return int(_quantize(value, self.q, self.lower, self.upper))
        if self.sampler == "loguniform":
            log = math.log(self.base)
            value = math.exp(
                r.uniform(math.log(self.lower) / log, math.log(self.upper) / log) * log
            )
            return min(max(int(value), self.lower), self.upper - 1)
        return r.randrange(self.lower, self.upper)

    def __repr__(self) -> str:
        return f"Integer({self.lower}, {self.upper}, {self.sampler!r}, q={self.q})"


class Categorical(Domain):
    """One of ``categories``, each with the same probability."""

    def __init__(self, categories: Sequence[Any]) -> None:
        if not len(categories):
            raise ValueError("choice() needs at least one category")
        self.categories = list(categories)

    def sample(self, spec: Any = None, rng: random.Random | None = None) -> Any:
        return _rng(rng).choice(self.categories)

    def __repr__(self) -> str:
        return f"Categorical({self.categories!r})"


class sample_from(Domain):
    """A value computed per variant by ``func(spec)``.

    ``spec`` is the variant being resolved with attribute access, so
    ``sample_from(lambda spec: spec.config.alpha * 2)`` depends on ``config["alpha"]``.
    A function of no argument is called without one.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        if not callable(func):
            raise TypeError(f"sample_from() takes a callable, got {type(func).__name__}")
        self.func = func
        try:
            params = inspect.signature(func).parameters.values()
            self._takes_spec = any(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                for p in params
            )
        except (TypeError, ValueError):  # builtins without a signature
            self._takes_spec = True

    def sample(self, spec: Any = None, rng: random.Random | None = None) -> Any:
        return self.func(spec) if self._takes_spec else self.func()

    def __repr__(self) -> str:
        return f"tune.sample_from({self.func!r})"


class function:
    """A function value that variant generation leaves as it is (``tune.function``)."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"tune.function({self.func!r})"


def grid_search(values: Sequence[Any]) -> dict[str, list[Any]]:
    """One grid axis: every value of ``values`` gives its own variants.

    Raises:
        TuneError: ``values`` is not a list or tuple.
        ValueError: ``values`` is empty (the grid would make no trial at all).
    """
    if not isinstance(values, (list, tuple)):
        raise TuneError(f"grid_search() takes a list of values, got {type(values).__name__}")
    if not values:
        raise ValueError("grid_search() needs at least one value: an empty axis makes no trial")
    return {"grid_search": list(values)}


def uniform(lower: float, upper: float) -> Float:
    """A float drawn uniformly from ``[lower, upper]``."""
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """``uniform`` rounded to a multiple of ``q``."""
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float whose logarithm is uniform between ``log(lower)`` and ``log(upper)``."""
    return Float(lower, upper, "loguniform", base=base)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """``loguniform`` rounded to a multiple of ``q``."""
    return Float(lower, upper, "loguniform", q=q, base=base)


def randn(mean: float = 0.0, sd: float = 1.0) -> Float:
    """A float from the normal distribution N(mean, sd**2)."""
    return Float(mean, sd, "normal")


def qrandn(mean: float, sd: float, q: float) -> Float:
    """``randn`` rounded to a multiple of ``q``."""
    return Float(mean, sd, "normal", q=q)


def randint(lower: int, upper: int) -> Integer:
    """An int drawn uniformly from ``[lower, upper)``."""
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """An int from ``[lower, upper]`` (upper included) rounded to a multiple of ``q``."""
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """An int in ``[lower, upper)`` whose logarithm is uniform."""
    return Integer(lower, upper, "loguniform", base=base)


def choice(categories: Sequence[Any]) -> Categorical:
    """One of ``categories``, uniformly."""
    return Categorical(categories)
