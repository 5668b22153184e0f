"""runtime_env with real workers, on one runtime for the module: env_vars, working_dir
(files, imports, excludes), py_modules, workers never shared across envs, nested tasks
and ``get_runtime_context().runtime_env``. Job-level envs and pip:
``test_runtime_env_setup.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import rayfield as rf
from rayfield.runtime_env import RuntimeEnv

pytestmark = pytest.mark.rayfield_runtime(num_cpus=2)


@rf.remote
def env_of(*names: str) -> dict[str, Any]:
    return {n: os.environ.get(n) for n in names} | {"pid": os.getpid()}


@rf.remote
def context_env() -> tuple[dict[str, Any], str]:
    ctx = rf.get_runtime_context()
    return dict(ctx.runtime_env), ctx.get_runtime_env_string()


@rf.remote
class EnvActor:
    def var(self, name: str) -> str | None:
        return os.environ.get(name)

    def imported(self) -> str:
        import wd_helper  # from the working_dir

        return str(wd_helper.VALUE)


@pytest.fixture
def wd(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "wd_helper.py").write_text("VALUE = 'helper'\n")
    (root / "notes.txt").write_text("read by relative path\n")
    (root / "data" / "large.bin").write_bytes(b"x" * 1000)
    return root


def test_env_vars_reach_tasks_and_actors(rayfield_module_runtime: dict[str, Any]) -> None:
    env = {"env_vars": {"RF_TEST_A": "a"}}
    got = rf.get(env_of.options(runtime_env=env).remote("RF_TEST_A"))
    assert got["RF_TEST_A"] == "a"
    assert rf.get(env_of.remote("RF_TEST_A"))["RF_TEST_A"] is None  # the default env
    actor = EnvActor.options(runtime_env=RuntimeEnv(env_vars={"RF_TEST_A": "actor"})).remote()
    assert rf.get(actor.var.remote("RF_TEST_A")) == "actor"


def test_workers_are_never_shared_across_envs(rayfield_module_runtime: dict[str, Any]) -> None:
    envs = [{"env_vars": {"RF_ALT": "one"}}, {"env_vars": {"RF_ALT": "two"}}]
    pids: dict[str, set[int]] = {"one": set(), "two": set()}
    for i in range(8):
        got = rf.get(env_of.options(runtime_env=envs[i % 2]).remote("RF_ALT"))
        assert got["RF_ALT"] == ("one", "two")[i % 2]
        pids[got["RF_ALT"]].add(got["pid"])
    default = {rf.get(env_of.remote())["pid"] for _ in range(4)}
    assert not pids["one"] & pids["two"] and not default & (pids["one"] | pids["two"])


def test_working_dir_files_are_importable_and_readable(
    rayfield_module_runtime: dict[str, Any], wd: Path
) -> None:
    @rf.remote
    def look() -> tuple[str, str, bool, str]:
        import wd_helper

        with open("notes.txt") as f:
            return wd_helper.VALUE, f.read().strip(), os.path.exists("data/large.bin"), os.getcwd()

    env = {"working_dir": str(wd), "excludes": ["data/"]}
    value, text, excluded_there, cwd = rf.get(look.options(runtime_env=env).remote())
    assert (value, text, excluded_there) == ("helper", "read by relative path", False)
    assert cwd != str(wd) and Path(cwd).stat().st_mode & 0o077 == 0  # a private copy
    actor = EnvActor.options(runtime_env={"working_dir": str(wd)}).remote()
    assert rf.get(actor.imported.remote()) == "helper"


def test_py_modules_are_on_the_path(
    rayfield_module_runtime: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "rf_mod_pkg").mkdir()
    (tmp_path / "rf_mod_pkg" / "__init__.py").write_text("NAME = 'package'\n")
    (tmp_path / "rf_mod_file.py").write_text("NAME = 'file'\n")

    @rf.remote
    def names() -> tuple[str, str]:
        import rf_mod_file
        import rf_mod_pkg

        return rf_mod_pkg.NAME, rf_mod_file.NAME

    mods = [str(tmp_path / "rf_mod_pkg"), str(tmp_path / "rf_mod_file.py")]
    assert rf.get(names.options(runtime_env={"py_modules": mods}).remote()) == ("package", "file")


def test_runtime_context_returns_the_env_in_effect(rayfield_module_runtime: dict[str, Any]) -> None:
    env = {"env_vars": {"RF_CTX": "1"}, "config": {"setup_timeout_seconds": 60}}
    got, text = rf.get(context_env.options(runtime_env=env).remote())
    assert got == env and json.loads(text) == env
    assert rf.get(context_env.remote()) == ({}, "{}")


def test_a_nested_task_inherits_its_parents_env(rayfield_module_runtime: dict[str, Any]) -> None:
    @rf.remote
    def parent() -> dict[str, Any]:
        return rf.get(env_of.remote("RF_NESTED"))

    got = rf.get(parent.options(runtime_env={"env_vars": {"RF_NESTED": "inherited"}}).remote())
    assert got["RF_NESTED"] == "inherited"


def test_bad_envs_fail_where_they_are_given(rayfield_module_runtime: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="unknown runtime_env key 'working_directory'"):
        env_of.options(runtime_env={"working_directory": "."})
    with pytest.raises(ValueError, match="not supported"):

        @rf.remote(runtime_env={"conda": "env"})
        def f() -> None: ...
