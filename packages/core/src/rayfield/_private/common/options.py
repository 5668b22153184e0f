"""Validation of ``@remote`` and ``.options()`` arguments, classic spellings included."""

from __future__ import annotations

import difflib
import math
import os
from typing import Any, TypedDict

from rayfield._private.common import runtime_env, scheduling, task_retry
from rayfield._private.common.scheduling import SchedulingStrategy

__all__ = [
    "ACTOR_OPTIONS",
    "TASK_OPTIONS",
    "ActorOptions",
    "RemoteOptions",
    "TaskOptions",
    "actor_resources",
    "check_node_resources",
    "check_resource_dict",
    "check_timeout",
    "node_resources_of",
    "normalize",
    "task_resources",
]


class TaskOptions(TypedDict, total=False):
    """Options of a remote function (``@remote(...)``, ``f.options(...)``).

    ``num_returns``: refs per call (classic ``num_return_vals``); ``num_cpus``,
    ``num_gpus``: amounts (fractions up to 1, whole numbers above); ``resources``: custom
    amounts; ``memory``: bytes; ``max_calls``: calls before the worker exits;
    ``max_retries``: runs after the first (-1: without end); ``retry_exceptions``: True
    or the exception classes that are retried; ``name``: shown in the state API;
    ``scheduling_strategy``: ``"DEFAULT"``, ``"SPREAD"``, a
    ``NodeAffinitySchedulingStrategy`` or a ``PlacementGroupSchedulingStrategy``
    (``rayfield.util.scheduling_strategies``); the older ``placement_group`` (a group,
    ``"default"``: the caller's when it captures child tasks, or None),
    ``placement_group_bundle_index`` (-1: any bundle) and
    ``placement_group_capture_child_tasks`` say the same as that strategy;
    ``runtime_env``: a dict or ``rayfield.runtime_env.RuntimeEnv``, over the job's.
    """

    num_returns: int
    num_return_vals: int
    num_cpus: float | None
    num_gpus: float | None
    resources: dict[str, float] | None
    memory: float | None
    max_calls: int
    max_retries: int
    retry_exceptions: bool | list[type[BaseException]] | tuple[type[BaseException], ...]
    name: str | None
    scheduling_strategy: SchedulingStrategy
    runtime_env: dict[str, Any] | None
    placement_group: Any
    placement_group_bundle_index: int
    placement_group_capture_child_tasks: bool | None


class ActorOptions(TypedDict, total=False):
    """Options of an actor class (``@remote(...)`` on a class, ``Cls.options(...)``).

    ``num_cpus``, ``num_gpus``, ``resources``, ``memory`` (bytes): held for the actor's
    life; ``max_restarts`` (classic ``max_reconstructions``) and ``max_task_retries``
    (-1: without end); ``max_concurrency``: calls at once (threaded or async actor);
    ``name``, ``namespace``, ``get_if_exists``: a named actor; ``lifetime="detached"``:
    outlives its driver; ``scheduling_strategy`` and the ``placement_group*`` options:
    where the actor is placed, as for tasks; ``runtime_env``: what its worker runs in,
    over the job's, as for tasks.
    """

    num_cpus: float | None
    num_gpus: float | None
    resources: dict[str, float] | None
    memory: float | None
    max_restarts: int
    max_reconstructions: int
    max_task_retries: int
    max_concurrency: int | None
    name: str | None
    namespace: str
    get_if_exists: bool
    lifetime: str | None
    scheduling_strategy: SchedulingStrategy
    runtime_env: dict[str, Any] | None
    placement_group: Any
    placement_group_bundle_index: int
    placement_group_capture_child_tasks: bool | None


class RemoteOptions(TaskOptions, ActorOptions, total=False):
    """What ``@remote(...)`` takes: the options of a remote function or of an actor class
    (each is checked against its own kind when the decorator is applied)."""


CLASSIC = {"num_return_vals": "num_returns", "max_reconstructions": "max_restarts"}
"""Classic option names and their modern ones."""
TASK_OPTIONS = frozenset(TaskOptions.__annotations__) - CLASSIC.keys()
ACTOR_OPTIONS = frozenset(ActorOptions.__annotations__) - CLASSIC.keys()
MAX_RESOURCE = 1e9
RETRY_COUNTS = ("max_retries", "max_restarts", "max_task_retries")  # -1: without end
MAX_COUNT = 2**31 - 1  # retries, restarts: a retry count travels as an int32
MAX_NUM_RETURNS = 100_000  # refs made per call; each costs the driver time and memory
MAX_CONCURRENCY = 100_000  # calls at once in one actor


def normalize(options: dict[str, Any], *, actor: bool) -> dict[str, Any]:
    """Check option names and values; map classic names to modern ones.

    Raises:
        TypeError: an unknown option (the message names the closest valid one and lists
            them all), a ``retry_exceptions`` that is not a bool or a list of exception
            classes, or a ``scheduling_strategy`` of another type.
        TypeError: ``resources`` that is not a dict of str names.
        ValueError: a resource amount that is negative, not finite (NaN, inf) or not a
            number, or an empty resource name; a num_returns outside 1..100,000; a retry
            or restart count other than -1 (no limit) or a whole number up to 2**31 - 1;
            a max_concurrency outside 1..100,000; a ``scheduling_strategy`` string other
            than ``"DEFAULT"`` or ``"SPREAD"``.
        TypeError, ValueError: a bad ``runtime_env`` (``common/runtime_env.check``: an
            unknown key or a missing path is named).
        TypeError, ValueError: a bad ``placement_group*`` option (a group of another type,
            a bundle index out of range), or both ``placement_group=`` and a
            ``PlacementGroupSchedulingStrategy``.
    """
    valid = ACTOR_OPTIONS if actor else TASK_OPTIONS
    out: dict[str, Any] = {}
    for key, value in options.items():
        key = CLASSIC.get(key, key)
        if key not in valid:
            raise TypeError(unknown_option(key, actor=actor))
        out[key] = value
    for key in ("num_cpus", "num_gpus", "memory"):
        if key in out and out[key] is not None:
            _check_amount(key, out[key])
    for name, amount in check_resource_dict(out.get("resources")).items():
        if name in ("CPU", "GPU"):
            raise ValueError(f"use num_cpus/num_gpus, not resources={{{name!r}: ...}}")
        _check_amount(f"resources[{name!r}]", amount)
    for key in RETRY_COUNTS:
        if key in out and out[key] is not None:
            _check_count(key, out[key])
    if out.get("max_concurrency") is not None:
        _check_whole("max_concurrency", out["max_concurrency"], 1, MAX_CONCURRENCY)
    if "scheduling_strategy" in out:
        out["scheduling_strategy"] = scheduling.check(out["scheduling_strategy"])
    _check_group_options(out)
    if "retry_exceptions" in out:
        out["retry_exceptions"] = task_retry.check(out["retry_exceptions"])
    if "runtime_env" in out:
        out["runtime_env"] = runtime_env.check(out["runtime_env"]) or None
    _check_whole("num_returns", out.get("num_returns", 1), 1, MAX_NUM_RETURNS)
    return out


def _check_group_options(out: dict[str, Any]) -> None:
    group = out.get("placement_group", "default")
    if group in ("default", None) and "placement_group_bundle_index" not in out:
        return
    if group in ("default", None):
        raise ValueError("placement_group_bundle_index needs placement_group=<a placement group>")
    if isinstance(out.get("scheduling_strategy"), scheduling.PlacementGroupSchedulingStrategy):
        raise ValueError(
            "give either placement_group= or a PlacementGroupSchedulingStrategy, not both"
        )
    scheduling.check_group_options(
        group,
        out.get("placement_group_bundle_index", -1),
        out.get("placement_group_capture_child_tasks"),
    )


def check_resource_dict(resources: Any) -> dict[str, Any]:
    """``resources=`` as a dict of non-empty names (``{}`` for None).

    Raises:
        TypeError: it is not a dict, or a name is not a str.
        ValueError: a name is empty or only spaces.
    """
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        raise TypeError(
            f"resources must be a dict of {{name: amount}}, e.g. {{'big_mem': 1}}, got "
            f"{type(resources).__name__} {resources!r} (use num_cpus/num_gpus for CPU and GPU)"
        )
    for name in resources:
        if not isinstance(name, str):
            raise TypeError(f"resource names must be str, got {type(name).__name__} {name!r}")
        if not name.strip():
            raise ValueError(f"resource names must not be empty, got {name!r}")
    return resources


def unknown_option(key: str, *, actor: bool) -> str:
    """The message for an unknown option ``key``: the closest valid name, then them all."""
    valid = sorted(ACTOR_OPTIONS | CLASSIC.keys() if actor else TASK_OPTIONS | CLASSIC.keys())
    kind = "actor classes" if actor else "remote functions"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"invalid option {key!r} for {kind}{hint} (valid options: {', '.join(valid)})"


def _check_count(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= MAX_COUNT:
        raise ValueError(
            f"{what} must be -1 (retry without end) or a whole number from 0 to {MAX_COUNT}, "
            f"got {value!r}"
        )


def _check_whole(what: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be a whole number from {low} to {high:,}, got {value!r}")


def _check_amount(what: str, value: Any) -> None:
    if isinstance(value, (int, float)) and not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if not isinstance(value, (int, float)) or value < 0 or value > MAX_RESOURCE:
        raise ValueError(f"{what} must be a number between 0 and {MAX_RESOURCE:g}, got {value!r}")
    if value > 1 and float(value) != int(value):
        raise ValueError(f"{what} above 1 must be a whole number, got {value}")


def task_resources(opts: dict[str, Any]) -> dict[str, float]:
    """Resources a task needs: 1 CPU unless told otherwise."""
    res = {"CPU": float(opts.get("num_cpus", 1) if opts.get("num_cpus") is not None else 1)}
    return _rest(res, opts)


def actor_resources(opts: dict[str, Any]) -> dict[str, float]:
    """Resources an actor holds for its lifetime: none unless a resource option is given."""
    if not any(opts.get(k) is not None for k in ("num_cpus", "num_gpus", "resources", "memory")):
        return {}
    return _rest({"CPU": float(opts.get("num_cpus") or 0)}, opts)


def _rest(res: dict[str, float], opts: dict[str, Any]) -> dict[str, float]:
    if opts.get("num_gpus"):
        res["GPU"] = float(opts["num_gpus"])
    if opts.get("memory"):
        res["memory"] = float(opts["memory"])
    for name, amount in (opts.get("resources") or {}).items():
        res[name] = float(amount)
    return {k: v for k, v in res.items() if v > 0}


def check_node_resources(resources: dict[str, float]) -> None:
    """Check a node's resources (``init(num_cpus=..., resources=...)``, ``rayfield start``).

    Raises:
        ValueError: an amount that is negative or not finite (NaN, inf), or an empty name.
        TypeError: a name that is not a str.
    """
    for name, amount in check_resource_dict(resources).items():
        if not math.isfinite(amount) or amount < 0:
            option = {"CPU": "num_cpus", "GPU": "num_gpus"}.get(name, f"resources[{name!r}]")
            raise ValueError(f"{option} must be a finite number >= 0, got {amount!r}")


def check_timeout(caller: str, timeout: Any) -> None:
    """Check ``get``/``wait``'s ``timeout``: None or a number of seconds >= 0.

    Raises:
        TypeError: not a number.
        ValueError: negative or NaN.
    """
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{caller}(timeout=...) must be None or seconds >= 0, got {timeout!r}")
    if not timeout >= 0:  # also NaN
        raise ValueError(
            f"{caller}(timeout=...) must be None (no limit) or seconds >= 0, got {timeout!r}"
        )


def node_resources_of(
    num_cpus: float | None, *, gpus: float | None, resources: Any
) -> dict[str, float]:
    """An embedded node's resources from ``init(num_cpus, num_gpus, resources)``: the
    machine's CPUs and detected GPUs where not given.

    Raises:
        TypeError: ``resources`` is not a dict of str names.
        ValueError: a bad amount or name, or ``CPU``/``GPU`` in ``resources``.
    """
    from rayfield._private.common.devices import detect_gpus

    out = {"CPU": float(num_cpus if num_cpus is not None else os.cpu_count() or 1)}
    gpus = gpus if gpus is not None else detect_gpus()
    if gpus:
        out["GPU"] = float(gpus)
    for name, amount in check_resource_dict(resources).items():
        if name in ("CPU", "GPU"):
            raise ValueError(f"use num_cpus/num_gpus instead of resources[{name!r}]")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise ValueError(f"resources[{name!r}] must be a number, got {amount!r}")
        out[name] = float(amount)
    check_node_resources(out)
    return out
