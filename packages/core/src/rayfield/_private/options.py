"""Validation of ``@remote`` and ``.options()`` arguments, classic spellings included."""

from __future__ import annotations

from typing import Any

from rayfield._private import task_retry

TASK_OPTIONS = {
    "num_returns",
    "num_cpus",
    "num_gpus",
    "resources",
    "memory",
    "max_calls",
    "max_retries",
    "retry_exceptions",
    "name",
}
ACTOR_OPTIONS = {
    "num_cpus",
    "num_gpus",
    "resources",
    "memory",
    "max_restarts",
    "max_concurrency",
    "name",
    "lifetime",
    "max_task_retries",
    "namespace",
    "get_if_exists",
}
CLASSIC = {"num_return_vals": "num_returns", "max_reconstructions": "max_restarts"}
MAX_RESOURCE = 1e9


def normalize(options: dict[str, Any], *, actor: bool) -> dict[str, Any]:
    """Check option names and values; map classic names to modern ones.

    Raises:
        TypeError: an unknown option (the message lists the valid ones), or a
            ``retry_exceptions`` that is not a bool or a list of exception classes.
        ValueError: a negative or non-numeric resource amount, a bad num_returns.
    """
    valid = ACTOR_OPTIONS if actor else TASK_OPTIONS
    out: dict[str, Any] = {}
    for key, value in options.items():
        key = CLASSIC.get(key, key)
        if key not in valid:
            kind = "actor classes" if actor else "remote functions"
            raise TypeError(
                f"invalid option {key!r} for {kind}; valid options: {', '.join(sorted(valid))}"
            )
        out[key] = value
    for key in ("num_cpus", "num_gpus", "memory"):
        if key in out and out[key] is not None:
            _check_amount(key, out[key])
    for name, amount in (out.get("resources") or {}).items():
        if name in ("CPU", "GPU"):
            raise ValueError(f"use num_cpus/num_gpus, not resources={{{name!r}: ...}}")
        _check_amount(f"resources[{name!r}]", amount)
    if "retry_exceptions" in out:
        out["retry_exceptions"] = task_retry.check(out["retry_exceptions"])
    n = out.get("num_returns", 1)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"num_returns must be an integer >= 1, got {n!r}")
    return out


def _check_amount(what: str, value: Any) -> None:
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
