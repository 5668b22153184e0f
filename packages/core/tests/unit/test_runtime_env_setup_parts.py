"""A node's runtime_env setup (``RuntimeEnvs.prepare``) without workers: what a worker of an
env starts with, and a failed pip setup remembered for a while (its steps faked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rayfield._private.common import runtime_env as renv
from rayfield._private.node_manager import runtime_envs
from rayfield._private.node_manager.runtime_envs import RuntimeEnvs


def test_a_worker_of_an_env_gets_its_env_vars_and_the_env(tmp_path: Path) -> None:
    env = renv.canonical({"env_vars": {"A": "1"}})
    overrides, python = RuntimeEnvs(tmp_path).prepare(env)
    assert python is None  # no pip: the node's Python
    assert overrides == {
        "A": "1",
        "RAYFIELD_RUNTIME_ENV": env,
        "RAYFIELD_RUNTIME_ENV_DIR": str(tmp_path),
    }


def test_a_failed_pip_setup_gives_failing_workers_and_is_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def failing_run(self: RuntimeEnvs, cmd: list[str], timeout_s: Any, what: str) -> None:
        calls.append(cmd)
        raise RuntimeError(f"{what} failed (exit status 1); its output ends with:\nno such pkg")

    monkeypatch.setattr(RuntimeEnvs, "_run", failing_run)
    envs = RuntimeEnvs(tmp_path)
    env = renv.canonical(renv.check({"pip": ["nope-pkg"]}))
    overrides, python = envs.prepare(env)
    assert python is None and "no such pkg" in overrides["RAYFIELD_RUNTIME_ENV_ERROR"]
    assert overrides["RAYFIELD_RUNTIME_ENV"] == env
    assert envs.prepare(env) == (overrides, None) and len(calls) == 1  # remembered
    monkeypatch.setattr(runtime_envs, "FAILED_SETUP_RETRY_S", 0.0)
    envs.prepare(env)
    assert len(calls) == 2  # tried again once the time passed
    assert not any((tmp_path / "pip").glob("*/bin"))  # the failed venv was removed
