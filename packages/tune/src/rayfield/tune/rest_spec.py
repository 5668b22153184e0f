"""What the Tune REST server accepts in ``POST /trials``: data only, inside its experiment.

A body is ``{"name": NAME, "spec": SPEC}``, at most :data:`MAX_BODY_BYTES` of JSON nested
at most :data:`MAX_DEPTH` deep. ``NAME`` names the new trials' folder inside the running
experiment's directory: letters, digits, ``_ - . =``, at most 100 characters, not starting
with a dot (so no ``/`` and no ``..``). ``SPEC`` takes only these keys:

* ``run``: the name of a registered trainable (``tune.register_trainable``);
* ``config``: the search space as JSON data; grid axes (``{"grid_search": [...]}``) are
  data, but an ``"eval"`` key with a string (``{"eval": "expr"}``, a Python expression
  Tune would evaluate) is refused anywhere in it;
* ``stop``: ``{metric: number}``;
* ``num_samples``: 1 to :data:`MAX_TRIALS`; with the grid, at most :data:`MAX_TRIALS`
  trials per request;
* ``resources_per_trial`` (or ``resources``): ``{resource: number >= 0}``;
* ``local_dir``: a directory inside the experiment's (default: the experiment's own);
* ``restore``: a checkpoint directory inside the experiment's.

Paths may be relative to the experiment directory; symlinks are resolved before the
check. Anything else is a :class:`BadSpec` (the server answers 400).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

__all__ = ["MAX_BODY_BYTES", "MAX_DEPTH", "MAX_TRIALS", "BadSpec", "check_request"]

MAX_BODY_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_TRIALS = 10_000
SPEC_KEYS = (
    "run",
    "config",
    "stop",
    "num_samples",
    "resources_per_trial",
    "resources",
    "local_dir",
    "restore",
)
_NAME = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9_.=-]{0,99}")


class BadSpec(ValueError):
    """A request body the server does not take; the message says what and why."""


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _check_data(value: Any, where: str, depth: int = 0) -> None:
    """Refuse code (``{"eval": ...}``) and nesting deeper than MAX_DEPTH in ``value``."""
    if depth > MAX_DEPTH:
        raise BadSpec(f"{where} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        if isinstance(value.get("eval"), str):  # {"eval": "expr"} would be evaluated
            raise BadSpec(
                f"{where} holds an 'eval' expression: the server takes data only, no code"
            )
        if "grid_search" in value:
            grid = value["grid_search"]
            if not isinstance(grid, list) or not grid:
                raise BadSpec(f"{where}.grid_search must be a non-empty list of values")
        for key, item in value.items():
            _check_data(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_data(item, f"{where}[{index}]", depth + 1)


def _variants(value: Any) -> int:
    """How many variants ``value`` makes: a grid axis adds up its values' variants."""
    if isinstance(value, dict):
        if "grid_search" in value and len(value) == 1:
            return sum(_variants(v) for v in value["grid_search"])
        count = 1
        for item in value.values():
            count *= _variants(item)
            if count > MAX_TRIALS:
                return count
        return count
    if isinstance(value, list):
        count = 1
        for item in value:
            count *= _variants(item)
            if count > MAX_TRIALS:
                return count
        return count
    return 1


def _inside(experiment_dir: str, value: Any, key: str) -> str:
    """``value`` (absolute, or relative to the experiment) resolved, when it is the
    experiment directory or lies inside it."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise BadSpec(f"spec.{key} must be a path inside the experiment directory")
    root = os.path.realpath(experiment_dir)
    path = os.path.realpath(os.path.join(root, value))
    if path != root and not path.startswith(root + os.sep):
        raise BadSpec(
            f"spec.{key} {value!r} is outside the experiment directory {experiment_dir}: "
            "the server only uses paths inside it"
        )
    return path


def check_request(body: Any, experiment_dir: str) -> tuple[str, dict[str, Any]]:
    """The trials' name and the spec for :meth:`Experiment.from_json`, checked.

    Args:
        body: the parsed JSON body.
        experiment_dir: the running experiment's directory.

    Returns:
        ``(name, spec)``; ``spec["local_dir"]`` is set (the experiment directory by
        default) and paths are resolved.

    Raises:
        BadSpec: see the module docstring.
    """
    if not isinstance(body, dict) or set(body) != {"name", "spec"}:
        raise BadSpec('the body must be {"name": ..., "spec": {...}} and nothing else')
    name, spec = body["name"], body["spec"]
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise BadSpec(
            f"name {name!r} must be 1-100 letters, digits or _-.= not starting with a dot "
            "(no '/' or '..')"
        )
    if not isinstance(spec, dict):
        raise BadSpec("spec must be a JSON object")
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise BadSpec(f"spec keys {unknown} are not accepted; accepted: {', '.join(SPEC_KEYS)}")
    if "resources" in spec and "resources_per_trial" in spec:
        raise BadSpec("pass resources or resources_per_trial, not both")
    out: dict[str, Any] = {}
    if not isinstance(spec.get("run"), str) or not spec["run"]:
        raise BadSpec("spec.run must be the name of a registered trainable")
    out["run"] = spec["run"]
    config = spec.get("config", {})
    if not isinstance(config, dict):
        raise BadSpec("spec.config must be a JSON object")
    _check_data(config, "spec.config")
    out["config"] = config
    stop = spec.get("stop", {})
    if not isinstance(stop, dict) or not all(_number(v) for v in stop.values()):
        raise BadSpec("spec.stop must be {metric: number}")
    out["stop"] = stop
    num_samples = spec.get("num_samples", 1)
    if type(num_samples) is not int or not 1 <= num_samples <= MAX_TRIALS:
        raise BadSpec(f"spec.num_samples must be an integer from 1 to {MAX_TRIALS}")
    out["num_samples"] = num_samples
    if num_samples * _variants(config) > MAX_TRIALS:
        raise BadSpec(f"the spec makes more than {MAX_TRIALS} trials (num_samples x grid)")
    resources = spec.get("resources_per_trial", spec.get("resources"))
    if resources is not None:
        if not isinstance(resources, dict) or not all(
            isinstance(k, str) and _number(v) and v >= 0 for k, v in resources.items()
        ):
            raise BadSpec("spec.resources_per_trial must be {resource: number >= 0}")
        out["resources_per_trial"] = resources
    out["local_dir"] = _inside(experiment_dir, spec.get("local_dir", "."), "local_dir")
    if "restore" in spec:
        out["restore"] = _inside(experiment_dir, spec["restore"], "restore")
        if not os.path.isdir(out["restore"]):
            raise BadSpec(f"spec.restore {spec['restore']!r} is not a checkpoint directory")
    return name, out
