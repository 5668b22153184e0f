"""Checkpoints: a directory of files that a trial saved, movable between processes.

A checkpoint travels as a *blob*: ``{"files": {relative path: bytes}, "meta": {...}}``. A
trial's actor packs what it saved into a blob; the driver writes disk checkpoints into the
trial directory (``checkpoint_000010/``) and ships blobs (or object refs to them) back to
an actor to restore, so a trial can move to another node.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Checkpoint", "pack_directory", "unpack_directory"]

METADATA_FILE = ".tune_metadata"
_DICT_FILE = "checkpoint_dict.pkl"


def pack_directory(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``path`` as ``{relative posix path: bytes}``."""
    root = Path(path)
    files: dict[str, bytes] = {}
    for file in sorted(root.rglob("*")):
        if file.is_file():
            files[file.relative_to(root).as_posix()] = file.read_bytes()
    return files


def unpack_directory(files: dict[str, bytes], path: str | os.PathLike[str]) -> str:
    """Write ``files`` (from :func:`pack_directory`) under ``path``; returns ``path``."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        target = root / rel
        if root.resolve() not in target.resolve().parents:
            raise ValueError(f"checkpoint file {rel!r} would land outside {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return str(root)


class Checkpoint:
    """A directory of checkpoint files (``tune.Checkpoint``).

    Create one with :meth:`from_directory` (or :meth:`from_dict`) in a trainable and pass it
    to ``tune.report(metrics, checkpoint=...)``; ``tune.get_checkpoint()`` gives it back after
    a restore. ``Result.checkpoint`` is a Checkpoint of the trial directory's copy.

    Attributes:
        path: the directory holding the files.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """A checkpoint of the files under ``path``.

        Raises:
            FileNotFoundError: ``path`` is not a directory.
        """
        if not os.path.isdir(path):
            raise FileNotFoundError(f"checkpoint directory {path} does not exist")
        return cls(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        """A checkpoint holding ``data`` (pickled into a fresh temporary directory)."""
        path = tempfile.mkdtemp(prefix="tune-checkpoint-")
        with open(os.path.join(path, _DICT_FILE), "wb") as f:
            pickle.dump(data, f)
        return cls(path)

    def to_dict(self) -> dict[str, Any]:
        """The dict given to :meth:`from_dict`.

        Raises:
            ValueError: the checkpoint was not made from a dict.
        """
        file = os.path.join(self.path, _DICT_FILE)
        if not os.path.exists(file):
            raise ValueError(f"checkpoint {self.path} was not created with from_dict()")
        with open(file, "rb") as f:
            data: dict[str, Any] = pickle.load(f)
        return data

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the files to ``path`` (default a new temporary directory); returns it."""
        target = str(path) if path is not None else tempfile.mkdtemp(prefix="tune-checkpoint-")
        shutil.copytree(self.path, target, dirs_exist_ok=True)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """The checkpoint's directory, for reading, inside a ``with`` block."""
        yield self.path

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)
