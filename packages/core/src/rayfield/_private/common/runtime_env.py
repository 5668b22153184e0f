"""runtime_env values: checking, merging and the canonical form (no files, no processes).

A runtime_env (Ray 2.x semantics) says what a task's or actor's worker process runs in:

- ``env_vars``: ``{str: str}`` set in the worker's environment;
- ``working_dir``: a local directory (or ``.zip``) whose files the worker runs in (its
  cwd, first on ``sys.path``), with ``excludes`` (gitignore-style patterns);
- ``py_modules``: local package directories, ``.py`` files or ``.whl`` files put on the
  worker's ``sys.path``;
- ``pip``: a list of requirements, a requirements file's path, or ``{"packages": [...],
  "pip_check": False}``, installed into a virtual environment on top of the worker's own;
- ``config``: ``{"setup_timeout_seconds": 600, "eager_install": True}``.

``check`` validates a value as given by a user (``init()``, ``@remote``, ``.options()``),
``merge`` puts a task's over its job's (Ray's rule: the task's keys win, ``env_vars``
merge key by key), and ``canonical`` gives the string that travels with a task and keys
a node's workers (sorted JSON; "" for the default, empty env). Local paths become
``rayfield-pkg://`` URIs of uploaded zips in ``driver/runtime_env_packages.py`` before a
runtime_env is made canonical.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_SETUP_TIMEOUT_S",
    "KNOWN_KEYS",
    "PKG_SCHEME",
    "UNSUPPORTED_KEYS",
    "canonical",
    "check",
    "is_uri",
    "merge",
    "parse",
    "setup_timeout_s",
]

PKG_SCHEME = "rayfield-pkg://"
"""URI scheme of a package (a zip) stored in the cluster: ``rayfield-pkg://<sha1 hex>``."""
DEFAULT_SETUP_TIMEOUT_S = 600
KNOWN_KEYS = ("config", "env_vars", "excludes", "pip", "py_modules", "working_dir")
UNSUPPORTED_KEYS = {
    "conda": "use 'pip' (a virtual environment on top of the worker's Python)",
    "container": "run the cluster's nodes in the container instead",
    "image_uri": "run the cluster's nodes in the image instead",
    "uv": "use 'pip'",
    "java_jars": "rayfield runs Python only",
    "nsight": "profile the worker with py-spy (`rayfield stack`) instead",
    "worker_process_setup_hook": "run the setup at the top of the task or in the actor's __init__",
}
CONFIG_KEYS = ("eager_install", "setup_timeout_seconds")
PIP_KEYS = ("packages", "pip_check", "pip_version")


def is_uri(value: str) -> bool:
    """Whether ``value`` names a package already stored in the cluster."""
    return value.startswith(PKG_SCHEME)


def check(env: Any, *, where: str = "runtime_env") -> dict[str, Any]:
    """A runtime_env as given by a user, checked and normalised: ``pip`` becomes
    ``{"packages": [...], "pip_check": bool}`` (a requirements file is read now), paths
    become absolute; empty values are dropped. ``None`` is ``{}``.

    Raises:
        TypeError: ``env`` is not a dict (or ``RuntimeEnv``), or a value has the wrong
            type (``env_vars`` not ``{str: str}``, ``py_modules`` not a list, ...).
        ValueError: an unknown key (named, with the closest known one), a key rayfield
            does not support (``conda``, ``container``: named, with what to use), a local
            path that does not exist (named), a bad ``config`` value.
    """
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"{where} must be a dict, got {type(env).__name__} {env!r}")
    out: dict[str, Any] = {}
    for key, value in env.items():
        if key in UNSUPPORTED_KEYS:
            raise ValueError(
                f"{where}[{key!r}] is not supported by rayfield: {UNSUPPORTED_KEYS[key]}"
            )
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown {where} key {key!r}{hint} (known: {', '.join(KNOWN_KEYS)})")
        if value is None:
            continue
        out[key] = _CHECKS[key](value, f"{where}[{key!r}]")
    if "excludes" in out and "working_dir" not in out:
        raise ValueError(f"{where}['excludes'] needs a 'working_dir' to apply to")
    return {k: v for k, v in out.items() if v not in ({}, [], "")}


def _env_vars(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError(f"{where} must be a dict of str to str, got {value!r}")
    return dict(value)


def _path(value: Any, where: str) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{where} must be a local path (str), got {type(value).__name__}")
    value = os.fspath(value)
    if is_uri(value):
        return value
    if "://" in value:
        raise ValueError(
            f"{where}: remote URIs ({value!r}) are not supported; give a local directory, "
            ".zip, .py or .whl file"
        )
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.exists(path):
        raise ValueError(f"{where}: the path {value!r} does not exist (resolved to {path})")
    return path


def _working_dir(value: Any, where: str) -> str:
    path = _path(value, where)
    if not is_uri(path) and not (os.path.isdir(path) or path.endswith(".zip")):
        raise ValueError(f"{where} must be a directory or a .zip file, got {path}")
    return path


def _py_modules(value: Any, where: str) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{where} must be a list of paths, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        path = _path(item, f"{where}[{i}]")
        if not (is_uri(path) or os.path.isdir(path) or path.endswith((".py", ".whl", ".zip"))):
            raise ValueError(
                f"{where}[{i}] must be a package directory or a .py, .whl or .zip file, got {path}"
            )
        out.append(path)
    return out


def _excludes(value: Any, where: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise TypeError(f"{where} must be a list of gitignore-style patterns, got {value!r}")
    return list(value)


def _pip(value: Any, where: str) -> dict[str, Any]:
    pip_check = False
    if isinstance(value, Mapping):
        unknown = set(value) - set(PIP_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)} (known: {PIP_KEYS})")
        if "packages" not in value:
            raise ValueError(f"{where} needs 'packages' (a list or a requirements file)")
        pip_check = bool(value.get("pip_check", False))
        value = value["packages"]
    if isinstance(value, (str, os.PathLike)):
        path = os.path.abspath(os.path.expanduser(os.fspath(value)))
        if not os.path.isfile(path):
            raise ValueError(f"{where}: the requirements file {value!r} does not exist")
        with open(path, encoding="utf-8") as f:
            value = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise TypeError(
            f"{where} must be a list of requirements, a requirements file or "
            f"{{'packages': [...], 'pip_check': False}}, got {value!r}"
        )
    packages = [p.strip() for p in value if p.strip()]
    return {"packages": packages, "pip_check": pip_check} if packages else {}


def _config(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be a dict, got {type(value).__name__}")
    unknown = set(value) - set(CONFIG_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (known: {CONFIG_KEYS})")
    out = dict(value)
    timeout = out.get("setup_timeout_seconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or (timeout < 1 and timeout != -1)
    ):
        raise ValueError(
            f"{where}['setup_timeout_seconds'] must be a whole number of seconds >= 1 "
            f"(-1: no limit), got {timeout!r}"
        )
    return out


_CHECKS = {
    "env_vars": _env_vars,
    "working_dir": _working_dir,
    "py_modules": _py_modules,
    "excludes": _excludes,
    "pip": _pip,
    "config": _config,
}


def merge(parent: Mapping[str, Any], child: Mapping[str, Any] | None) -> dict[str, Any]:
    """The runtime_env of a task or actor (``child``, None: not given) under its job's or
    parent task's (``parent``), as Ray merges them: the child's keys replace the parent's,
    except ``env_vars``, merged key by key (the child's value wins)."""
    if not child:
        return dict(parent)
    out = {**parent, **child}
    if "env_vars" in parent and "env_vars" in child:
        out["env_vars"] = {**parent["env_vars"], **child["env_vars"]}
    if "working_dir" in child and "excludes" not in child:
        out.pop("excludes", None)  # the parent's excludes were for the parent's directory
    return out


def canonical(env: Mapping[str, Any]) -> str:
    """The string form that travels with a task and keys workers: sorted, compact JSON;
    "" for the empty (default) runtime_env."""
    if not env:
        return ""
    return json.dumps(env, sort_keys=True, separators=(",", ":"))


def parse(text: str) -> dict[str, Any]:
    """The runtime_env of a canonical string ("" -> ``{}``)."""
    return dict(json.loads(text)) if text else {}


def setup_timeout_s(env: Mapping[str, Any]) -> float | None:
    """Seconds a node may spend setting ``env`` up (None: no limit)."""
    timeout = (env.get("config") or {}).get("setup_timeout_seconds", DEFAULT_SETUP_TIMEOUT_S)
    return None if timeout == -1 else float(timeout)
