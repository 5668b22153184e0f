"""runtime_env set up with real workers, each test on a runtime of its own: the job's env
(``init(runtime_env=...)``, ``RAYFIELD_JOB_RUNTIME_ENV``) merged under a task's, and pip
(a wheel built here; a failing install is a ``RuntimeEnvSetupError`` with pip's words)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import rayfield as rf
from rayfield.exceptions import RuntimeEnvSetupError
from rayfield.testing import local_runtime

pytestmark = pytest.mark.rayfield_runtime(num_cpus=2)


@rf.remote
def env_of(*names: str) -> dict[str, Any]:
    return {n: os.environ.get(n) for n in names} | {"pid": os.getpid()}


@rf.remote
class EnvActor:
    def var(self, name: str) -> str | None:
        return os.environ.get(name)


def test_job_env_merges_under_task_env(tmp_path: Path, rayfield_leak_check: Any) -> None:
    job = {"env_vars": {"RF_JOB": "job", "RF_BOTH": "job"}}
    with local_runtime(num_cpus=1, temp_dir=tmp_path, runtime_env=job):
        assert rf.get_runtime_context().runtime_env == job
        got = rf.get(env_of.remote("RF_JOB", "RF_BOTH"))
        assert (got["RF_JOB"], got["RF_BOTH"]) == ("job", "job")
        task_env = {"env_vars": {"RF_BOTH": "task", "RF_TASK": "task"}}
        got = rf.get(env_of.options(runtime_env=task_env).remote("RF_JOB", "RF_BOTH", "RF_TASK"))
        assert (got["RF_JOB"], got["RF_BOTH"], got["RF_TASK"]) == ("job", "task", "task")


def test_job_env_from_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rayfield_leak_check: Any
) -> None:
    monkeypatch.setenv("RAYFIELD_JOB_RUNTIME_ENV", json.dumps({"env_vars": {"RF_SUB": "yes"}}))
    with local_runtime(num_cpus=1, temp_dir=tmp_path):
        assert rf.get(env_of.remote("RF_SUB"))["RF_SUB"] == "yes"
    monkeypatch.setenv("RAYFIELD_JOB_RUNTIME_ENV", "{not json")
    with pytest.raises(ValueError, match="RAYFIELD_JOB_RUNTIME_ENV"):
        rf.init(num_cpus=1, temp_dir=str(tmp_path))
    assert not rf.is_initialized()


def _wheel(folder: Path, name: str = "rf_tiny_wheel", version: str = "0.1") -> Path:
    """A pure-Python wheel of one module, written by hand (no build backend)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 'from the wheel'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return wheel


@rf.remote
def from_wheel() -> tuple[str, str]:
    import rf_tiny_wheel

    return rf_tiny_wheel.VALUE, sys.prefix


@pytest.mark.timeout(240)
def test_pip_installs_into_a_venv(rayfield_runtime: dict[str, Any], tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    value, prefix = rf.get(from_wheel.options(runtime_env={"pip": [str(wheel)]}).remote())
    assert value == "from the wheel" and prefix != sys.prefix
    assert Path(prefix).is_relative_to(Path(rayfield_runtime["session_dir"]).parent)
    with pytest.raises(ModuleNotFoundError):  # the default env does not have it
        rf.get(from_wheel.remote())


@pytest.mark.timeout(240)
def test_a_failing_pip_install_is_a_setup_error(
    rayfield_runtime: dict[str, Any], tmp_path: Path
) -> None:
    missing = str(tmp_path / "rf_missing-1.0-py3-none-any.whl")
    with pytest.raises(RuntimeEnvSetupError, match="pip install failed") as info:
        rf.get(from_wheel.options(runtime_env={"pip": [missing]}).remote())
    assert "rf_missing-1.0-py3-none-any.whl" in info.value.error_message  # pip's own words
    actor = EnvActor.options(runtime_env={"pip": [missing]}).remote()
    with pytest.raises(RuntimeEnvSetupError):
        rf.get(actor.var.remote("HOME"))
    assert rf.get(env_of.remote())["pid"] > 0  # the node goes on


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pip_installs_a_package_from_the_registry(rayfield_runtime: dict[str, Any]) -> None:
    @rf.remote
    def table() -> str:
        import tabulate

        return str(tabulate.tabulate([[1, 2]]))

    assert "1" in rf.get(table.options(runtime_env={"pip": ["tabulate"]}).remote())
