"""Validation of task and actor options, and of get()'s argument (no processes)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import rayfield as rf
from rayfield._private.common import options as opt


def fn() -> int:
    return 1


class Actor:
    pass


NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("key", ["num_cpus", "num_gpus", "memory"])
def test_non_finite_amounts_are_refused_naming_the_option(key: str, value: float) -> None:
    pattern = rf"{key} must be a finite number, got {value!r}"
    for actor in (False, True):
        with pytest.raises(ValueError, match=pattern):
            opt.normalize({key: value}, actor=actor)
    with pytest.raises(ValueError, match=pattern):
        rf.remote(**{key: value})(fn)  # a task
    with pytest.raises(ValueError, match=pattern):
        rf.remote(**{key: value})(Actor)  # an actor
    with pytest.raises(ValueError, match=pattern):
        rf.remote(fn).options(**{key: value})
    with pytest.raises(ValueError, match=pattern):
        rf.remote(Actor).options(**{key: value})


@pytest.mark.parametrize("value", NON_FINITE)
def test_non_finite_custom_resources_are_refused(value: float) -> None:
    pattern = rf"resources\['x'\] must be a finite number, got {value!r}"
    with pytest.raises(ValueError, match=pattern):
        rf.remote(resources={"x": value})(fn)
    with pytest.raises(ValueError, match=pattern):
        rf.remote(Actor).options(resources={"x": value})


def test_finite_amounts_still_pass() -> None:
    out = opt.normalize({"num_cpus": 0.5, "num_gpus": 2, "resources": {"x": 1e6}}, actor=False)
    assert opt.task_resources(out) == {"CPU": 0.5, "GPU": 2.0, "x": 1e6}


@pytest.mark.parametrize("value", [-5, -2, 1.5, "3", True, None])
@pytest.mark.parametrize("key", ["max_retries", "max_restarts", "max_task_retries"])
def test_retry_counts_are_minus_one_or_whole_numbers_at_least_zero(key: str, value: Any) -> None:
    actor = key != "max_retries"
    if value is None:  # not given: the default
        opt.normalize({key: value}, actor=actor)
        return
    with pytest.raises(ValueError, match=rf"{key} must be -1 \(retry without end\) or a whole"):
        opt.normalize({key: value}, actor=actor)


def test_retry_counts_that_are_valid() -> None:
    for n in (-1, 0, 3):
        assert opt.normalize({"max_retries": n}, actor=False)["max_retries"] == n
        assert opt.normalize({"max_restarts": n}, actor=True)["max_restarts"] == n
    assert opt.normalize({"max_reconstructions": -1}, actor=True) == {"max_restarts": -1}
    with pytest.raises(ValueError, match="max_restarts must be -1"):
        opt.normalize({"max_reconstructions": -3}, actor=True)  # the classic name
    with pytest.raises(ValueError, match="max_retries must be -1"):
        rf.remote(fn).options(max_retries=-5)
    with pytest.raises(ValueError, match="max_restarts must be -1"):
        rf.remote(max_restarts=-2)(Actor)


@pytest.mark.parametrize("bad", [42, "abc", b"ab", 1.5, None, object()])
def test_get_of_something_that_is_not_a_ref_is_one_clear_type_error(bad: Any) -> None:
    expected = f"get() takes an ObjectRef or a list of ObjectRefs, got {type(bad).__name__}"
    with pytest.raises(TypeError) as err:
        rf.get(bad)
    assert str(err.value) == expected
    with pytest.raises(TypeError) as err:
        rf.get([bad])
    assert str(err.value) == expected


def test_node_resources_must_be_finite() -> None:
    opt.check_node_resources({"CPU": 2.0, "x": 0.0})
    with pytest.raises(ValueError, match="num_cpus must be a finite number >= 0, got nan"):
        opt.check_node_resources({"CPU": math.nan})
    with pytest.raises(ValueError, match=r"resources\['x'\] must be a finite number >= 0"):
        rf.init(num_cpus=1, resources={"x": math.inf})
    assert not rf.is_initialized()
