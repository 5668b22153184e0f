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


@pytest.mark.parametrize(
    ("options", "error", "pattern"),
    [
        ({"num_returns": 10**9}, ValueError, r"num_returns must be a whole number from 1 to"),
        ({"num_returns": 0}, ValueError, r"num_returns must be a whole number from 1"),
        ({"num_returns": True}, ValueError, r"num_returns"),
        ({"max_retries": 10**30}, ValueError, r"max_retries must be -1 .* to 2147483647"),
        ({"resources": "CPU"}, TypeError, r"resources must be a dict of \{name: amount\}.*str"),
        ({"resources": {"": 1}}, ValueError, r"resource names must not be empty"),
        ({"resources": {"  ": 1}}, ValueError, r"resource names must not be empty"),
        ({"resources": {3: 1}}, TypeError, r"resource names must be str, got int 3"),
    ],
)
def test_out_of_range_task_options_name_the_option(
    options: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        opt.normalize(options, actor=False)
    with pytest.raises(error, match=pattern):
        rf.remote(fn).options(**options)


@pytest.mark.parametrize("value", [0, -1, 10**6, 1.5, True])
def test_max_concurrency_is_a_whole_number_from_one(value: Any) -> None:
    with pytest.raises(ValueError, match=r"max_concurrency must be a whole number from 1"):
        rf.remote(Actor).options(max_concurrency=value)
    assert opt.normalize({"max_concurrency": 8}, actor=True) == {"max_concurrency": 8}


@pytest.mark.parametrize(
    ("timeout", "error"), [(math.nan, ValueError), (-1, ValueError), ("5", TypeError)]
)
def test_get_and_wait_refuse_a_bad_timeout_before_anything_else(
    timeout: Any, error: type[Exception]
) -> None:
    # Raised before rayfield is even initialized: the argument is checked first.
    with pytest.raises(error, match=r"get\(timeout=...\) must be None"):
        rf.get([], timeout=timeout)
    with pytest.raises(error, match=r"wait\(timeout=...\) must be None"):
        rf.wait([], timeout=timeout)
    opt.check_timeout("get", 0)
    opt.check_timeout("get", None)


def test_get_actor_of_a_non_string_name_says_so() -> None:
    with pytest.raises(TypeError, match=r"get_actor\(\) takes the actor's name as a str, got int"):
        rf.get_actor(123)  # type: ignore[arg-type]


def test_node_resources_of_init() -> None:
    assert opt.node_resources_of(2, gpus=0, resources={"x": 1}) == {"CPU": 2.0, "x": 1.0}
    with pytest.raises(TypeError, match=r"resources must be a dict"):
        opt.node_resources_of(2, gpus=0, resources="CPU")
    with pytest.raises(ValueError, match=r"must not be empty"):
        opt.node_resources_of(2, gpus=0, resources={"": 1})
    with pytest.raises(ValueError, match=r"use num_cpus/num_gpus"):
        opt.node_resources_of(2, gpus=0, resources={"CPU": 1})
