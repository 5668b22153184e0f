"""Checkpoint files are this user's alone: written 0700/0600, and a symlink or another
user's file is refused when read back (`rayfield.rllib.agents.checkpoints`).

The tests run as root: ``chown`` to another uid plays the other user."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from rayfield.exceptions import UnsafeFileError
from rayfield.rllib.agents import checkpoints
from rayfield.rllib.scripts import _write_out

OTHER_UID = 4242
ALGO_STATE = {"algorithm": "PG", "config": {"lr": 0.1}, "iteration": 3}


@pytest.fixture
def login_umask() -> Iterator[None]:
    """The umask of a login shell (022: files 0644 unless made private), restored after."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _write(tmp_path: Path) -> Path:
    state = {"worker": {"w": torch.arange(3.0)}}
    return Path(checkpoints.write(tmp_path / "trial", 3, state, ALGO_STATE))


@pytest.mark.usefixtures("login_umask")
def test_checkpoint_directories_are_0700_and_files_0600(tmp_path: Path) -> None:
    path = _write(tmp_path)
    ckpt = path.parent
    assert _mode(tmp_path / "trial") == 0o700  # made by the save, so private too
    assert _mode(ckpt) == 0o700
    files = sorted(p.name for p in ckpt.iterdir())
    assert files == sorted(
        [checkpoints.STATE_FILE, checkpoints.ALGO_FILE, checkpoints.META_FILE, "checkpoint-3"]
    )
    assert {p.name: _mode(p) for p in ckpt.iterdir()} == {name: 0o600 for name in files}
    worker, algo = checkpoints.read(path)
    assert torch.equal(worker["worker"]["w"], torch.arange(3.0)) and algo == ALGO_STATE


@pytest.mark.parametrize("name", [checkpoints.STATE_FILE, checkpoints.ALGO_FILE])
def test_a_checkpoint_file_of_another_user_is_refused(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path)
    os.chown(path.parent / name, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeFileError, match=rf"{name}.*uid {OTHER_UID}"):
        checkpoints.read(path)


@pytest.mark.parametrize("name", [checkpoints.STATE_FILE, checkpoints.ALGO_FILE])
def test_a_planted_symlink_in_a_checkpoint_is_refused(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    os.replace(path.parent / name, elsewhere)
    (path.parent / name).symlink_to(elsewhere)
    with pytest.raises(UnsafeFileError, match="symlink"):
        checkpoints.read(path)


def test_a_checkpoint_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path)
    os.chown(path.parent, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeFileError, match=r"checkpoint directory.*not yours"):
        checkpoints.read(path)
    with pytest.raises(UnsafeFileError):
        checkpoints.read(path.parent)


def test_a_group_writable_checkpoint_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path)
    os.chmod(path.parent / checkpoints.ALGO_FILE, 0o664)
    with pytest.raises(UnsafeFileError, match="group or others can write it"):
        checkpoints.read(path)


def test_saving_into_another_users_checkpoint_directory_is_refused(tmp_path: Path) -> None:
    planted = tmp_path / "trial" / "checkpoint_3"
    planted.mkdir(parents=True)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeFileError, match="not yours"):
        _write(tmp_path)
    assert list(planted.iterdir()) == []


@pytest.mark.usefixtures("login_umask")
@pytest.mark.parametrize("name", ["episodes.pkl", "episodes.json"])
def test_rollout_out_is_0600_and_refuses_a_planted_symlink(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    _write_out(str(out), [[[[0.0], 1, [0.5], 1.0, True]]])
    assert _mode(out) == 0o600
    if name.endswith(".json"):
        assert json.loads(out.read_text()) == [[[[0.0], 1, [0.5], 1.0, True]]]
    target = tmp_path / "target"
    target.write_text("keep")
    out.unlink()
    out.symlink_to(target)
    with pytest.raises(UnsafeFileError, match="symlink"):
        _write_out(str(out), [])
    assert target.read_text() == "keep"
