"""runtime_env: what the worker of a task or actor runs in (Ray 2.x's ``ray.runtime_env``).

A runtime_env is a dict, given to ``rayfield.init(runtime_env=...)`` (the job's: every task
and actor of the job), ``@rayfield.remote(runtime_env=...)`` or ``.options(runtime_env=...)``
(one task or actor, over the job's: its keys replace the job's, ``env_vars`` merge key by
key). :class:`RuntimeEnv` is the same dict with keyword arguments and checks::

    rayfield.init(runtime_env={"working_dir": ".", "excludes": ["data/"]})

    @rayfield.remote(runtime_env=RuntimeEnv(env_vars={"OMP_NUM_THREADS": "1"}, pip=["tabulate"]))
    def f(): ...

Keys:

- ``env_vars`` (``{str: str}``): set in the worker's environment.
- ``working_dir`` (a local directory or ``.zip``): zipped (at most 100 MiB, after
  ``excludes``), stored in the cluster once per content, unpacked once per node into a
  cache directory of this user; the worker's cwd and first on its ``sys.path``.
- ``excludes`` (gitignore-style patterns, relative to ``working_dir``): files left out.
- ``py_modules`` (a list of package directories, ``.py``, ``.whl`` or ``.zip`` files):
  put on the worker's ``sys.path`` the same way.
- ``pip`` (a list of requirements, a requirements file, or ``{"packages": [...],
  "pip_check": False}``): installed into a virtual environment on top of the worker's
  own (its packages stay importable; the installed ones win), made once per node and
  kept; the worker runs that environment's Python.
- ``config`` (``{"setup_timeout_seconds": 600}``, -1: no limit; ``eager_install`` is
  accepted and has no effect): the longest a node may take to set the env up.

``conda``, ``container``, ``image_uri`` and ``uv`` are refused with a ``ValueError`` saying
what to use instead; an unknown key or a path that does not exist is a ``ValueError``
naming it, raised where the runtime_env is given. A worker serves tasks of one runtime_env
only. A setup that fails (a pip install, a package that cannot be fetched) fails the task,
or the actor's creation and calls, with ``rayfield.exceptions.RuntimeEnvSetupError``.
``rayfield.get_runtime_context().runtime_env`` is the runtime_env in effect.
"""

from __future__ import annotations

import json
from typing import Any

from rayfield._private.common import runtime_env as _check

__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]


class RuntimeEnvConfig(dict[str, Any]):
    """The ``config`` of a runtime_env (Ray's ``RuntimeEnvConfig``).

    Args:
        setup_timeout_seconds: the longest a node may take to set the env up (a pip
            install included), seconds >= 1; -1: no limit.
        eager_install: accepted for Ray's programs; envs are set up when a task needs them.

    Raises:
        ValueError: a bad ``setup_timeout_seconds``.
    """

    def __init__(self, setup_timeout_seconds: int = 600, eager_install: bool = True) -> None:
        super().__init__(setup_timeout_seconds=setup_timeout_seconds, eager_install=eager_install)
        _check.check({"config": dict(self)})


class RuntimeEnv(dict[str, Any]):
    """A runtime_env (Ray's ``RuntimeEnv``): a dict of the keys above, checked when made.

    Args:
        py_modules: package directories, ``.py``, ``.whl`` or ``.zip`` files for ``sys.path``.
        working_dir: a local directory or ``.zip``: the worker's cwd and first on ``sys.path``.
        pip: requirements (a list, a requirements file, or ``{"packages": [...],
            "pip_check": False}``).
        env_vars: environment variables of the worker (``{str: str}``).
        config: a :class:`RuntimeEnvConfig` or dict.
        **kwargs: other keys (``excludes``); ``conda``, ``container`` and unknown keys raise.

    Raises:
        TypeError: a value of the wrong type.
        ValueError: an unknown or unsupported key (named), a path that does not exist.
    """

    def __init__(
        self,
        *,
        py_modules: list[str] | None = None,
        working_dir: str | None = None,
        pip: list[str] | str | dict[str, Any] | None = None,
        env_vars: dict[str, str] | None = None,
        config: dict[str, Any] | RuntimeEnvConfig | None = None,
        **kwargs: Any,
    ) -> None:
        given = {
            "py_modules": py_modules,
            "working_dir": working_dir,
            "pip": pip,
            "env_vars": env_vars,
            "config": config,
            **kwargs,
        }
        given = {k: v for k, v in given.items() if v is not None}
        _check.check(given)
        super().__init__(given)

    @classmethod
    def deserialize(cls, serialized: str) -> RuntimeEnv:
        """A runtime_env from :meth:`serialize`'s JSON (or ``get_runtime_env_string()``)."""
        env = cls.__new__(cls)
        dict.__init__(env, json.loads(serialized) if serialized else {})
        return env

    def serialize(self) -> str:
        """The runtime_env as JSON."""
        return json.dumps(dict(self), sort_keys=True)

    def env_vars(self) -> dict[str, str]:
        """Its ``env_vars`` (``{}`` when none)."""
        return dict(self.get("env_vars") or {})

    def working_dir(self) -> str:
        """Its ``working_dir`` ("" when none; a ``rayfield-pkg://`` URI once submitted)."""
        return str(self.get("working_dir") or "")

    def py_modules(self) -> list[str]:
        """Its ``py_modules`` (``[]`` when none)."""
        return list(self.get("py_modules") or [])
