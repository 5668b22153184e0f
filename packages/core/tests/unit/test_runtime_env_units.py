"""runtime_env values without processes: checks, merging, the canonical form, packing of
working_dir and py_modules (excludes, the size limit), and ``RuntimeEnv``."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from rayfield._private.common import options
from rayfield._private.common import runtime_env as renv
from rayfield._private.driver import runtime_env_packages as packages
from rayfield.runtime_env import RuntimeEnv, RuntimeEnvConfig


def test_unknown_key_is_named_with_the_closest_known_one() -> None:
    with pytest.raises(ValueError, match=r"unknown runtime_env key 'env_var'.*'env_vars'"):
        renv.check({"env_var": {"A": "1"}})


@pytest.mark.parametrize("key", ["conda", "container"])
def test_conda_and_container_are_not_supported(key: str) -> None:
    with pytest.raises(ValueError, match=rf"runtime_env\['{key}'\] is not supported"):
        renv.check({key: "x"})


def test_missing_paths_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        renv.check({"working_dir": str(tmp_path / "nope")})
    with pytest.raises(ValueError, match=r"py_modules'\]\[1\].*does not exist"):
        renv.check({"py_modules": [str(tmp_path), str(tmp_path / "gone.py")]})
    with pytest.raises(ValueError, match="requirements file"):
        renv.check({"pip": str(tmp_path / "requirements.txt")})


def test_bad_types_are_type_errors() -> None:
    with pytest.raises(TypeError, match="env_vars"):
        renv.check({"env_vars": {"A": 1}})
    with pytest.raises(TypeError, match="must be a dict"):
        renv.check(["env_vars"])
    with pytest.raises(ValueError, match="setup_timeout_seconds"):
        renv.check({"config": {"setup_timeout_seconds": 0}})


def test_pip_forms_normalise_to_packages(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("# a comment\ntabulate\n\nsix==1.16.0\n")
    want = {"pip": {"packages": ["tabulate", "six==1.16.0"], "pip_check": False}}
    assert renv.check({"pip": str(req)}) == want
    assert renv.check({"pip": ["tabulate", "six==1.16.0"]}) == want
    got = renv.check({"pip": {"packages": ["tabulate"], "pip_check": True}})
    assert got == {"pip": {"packages": ["tabulate"], "pip_check": True}}


def test_merge_task_keys_over_job_keys_and_env_vars_key_by_key() -> None:
    job = {"env_vars": {"A": "job", "B": "job"}, "working_dir": "rayfield-pkg://aa", "pip": {}}
    task = {"env_vars": {"B": "task", "C": "task"}, "working_dir": "rayfield-pkg://bb"}
    merged = renv.merge(job, task)
    assert merged["env_vars"] == {"A": "job", "B": "task", "C": "task"}
    assert merged["working_dir"] == "rayfield-pkg://bb"
    assert renv.merge(job, None) == job


def test_canonical_is_sorted_and_empty_is_default() -> None:
    a = renv.canonical({"env_vars": {"B": "2", "A": "1"}})
    b = renv.canonical({"env_vars": {"A": "1", "B": "2"}})
    assert a == b and json.loads(a) == {"env_vars": {"A": "1", "B": "2"}}
    assert renv.canonical({}) == ""
    assert renv.parse("") == {}


def _tree(root: Path) -> None:
    (root / "data").mkdir(parents=True)
    (root / "pkg").mkdir()
    (root / "main.py").write_text("X = 1\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "data" / "big.bin").write_bytes(b"0" * 100)
    (root / "model.ckpt").write_bytes(b"1")


def _names(blob: bytes) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(blob)).namelist())


def test_zip_honours_gitignore_style_excludes(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert _names(packages.zip_directory(str(tmp_path), ["data/", "*.ckpt"])) == [
        "main.py",
        "pkg/__init__.py",
    ]
    assert "data/big.bin" in _names(packages.zip_directory(str(tmp_path)))


def test_zip_is_deterministic_so_its_uri_is_its_content(tmp_path: Path) -> None:
    _tree(tmp_path)
    env = renv.check({"working_dir": str(tmp_path)})
    first, blobs = packages.package(env)
    os.utime(tmp_path / "main.py", (1, 1))  # times do not count
    again, _ = packages.package(env)
    assert first == again and list(blobs) == [first["working_dir"]]
    assert packages.blob_matches(first["working_dir"], blobs[first["working_dir"]])
    (tmp_path / "main.py").write_text("X = 2\n")
    changed, _ = packages.package(env)
    assert changed["working_dir"] != first["working_dir"]


def test_a_working_dir_over_100_mib_is_refused_with_its_size(tmp_path: Path) -> None:
    with open(tmp_path / "huge.bin", "wb") as f:  # sparse: no disk used
        f.truncate(packages.MAX_PACKAGE_BYTES + (5 << 20))
    (tmp_path / "small.py").write_text("")
    with pytest.raises(ValueError, match=r"105\.0 MiB.*100 MiB.*excludes"):
        packages.package(renv.check({"working_dir": str(tmp_path)}))
    env = renv.check({"working_dir": str(tmp_path), "excludes": ["*.bin"]})
    resolved, _ = packages.package(env)
    assert "excludes" not in resolved


def test_py_modules_pack_a_package_under_its_name_and_a_file_at_the_root(tmp_path: Path) -> None:
    _tree(tmp_path)
    env = renv.check({"py_modules": [str(tmp_path / "pkg"), str(tmp_path / "main.py")]})
    resolved, blobs = packages.package(env)
    pkg_uri, file_uri = resolved["py_modules"]
    assert _names(blobs[pkg_uri]) == ["pkg/__init__.py"]
    assert _names(blobs[file_uri]) == ["main.py"]


def test_runtime_env_class_is_a_checked_dict(tmp_path: Path) -> None:
    env = RuntimeEnv(env_vars={"A": "1"}, config=RuntimeEnvConfig(setup_timeout_seconds=30))
    assert isinstance(env, dict) and env["env_vars"] == {"A": "1"}
    assert env.env_vars() == {"A": "1"} and env.working_dir() == ""
    assert RuntimeEnv.deserialize(env.serialize()) == env
    with pytest.raises(ValueError, match="unknown runtime_env key"):
        RuntimeEnv(workdir=str(tmp_path))


def test_options_check_runtime_env_where_it_is_given(tmp_path: Path) -> None:
    got = options.normalize({"runtime_env": RuntimeEnv(env_vars={"A": "1"})}, actor=False)
    assert got["runtime_env"] == {"env_vars": {"A": "1"}}
    with pytest.raises(ValueError, match="does not exist"):
        options.normalize({"runtime_env": {"working_dir": str(tmp_path / "x")}}, actor=True)


def test_a_forwarded_task_keeps_its_runtime_env() -> None:
    from rayfield._private.node_manager.task_spec import TaskSpec
    from rayfield._private.protocol import messages

    spec = TaskSpec(b"t" * 20, b"payload", runtime_env='{"env_vars":{"A":"1"}}')
    raw = messages.encode_forward_batch("origin", [(spec.to_native(), [])])
    [(_, decoded, _)] = messages.decode_forward_batch(raw)[0]
    assert TaskSpec.from_native(decoded).runtime_env == spec.runtime_env
