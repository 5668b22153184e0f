"""Checkpoints: a directory of files that a trial saved, movable between processes.

A checkpoint travels as a *blob*: ``{"files": {relative path: bytes}, "meta": {...}}``. A
trial's actor packs what it saved into a blob; the driver writes disk checkpoints into the
trial directory (``checkpoint_000010/``, mode 0700, its Tune files 0600) and ships blobs
(or object refs to them) back to an actor to restore, so a trial can move to another node.

A checkpoint directory holds the trial's files, the blob's metadata as JSON
(:data:`METADATA_FILE`) and, for a checkpoint saved as a dict, ``checkpoint_dict.json``
(plain JSON values) or ``checkpoint_dict.pkl`` (anything else, pickled). A pickle from a
directory is loaded only with ``trusted=True`` (see :mod:`rayfield.tune.pickles`); so is
the pickled ``.tune_metadata`` of older checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rayfield.tune.pickles import UntrustedPickleError, json_exact, load_data
from rayfield.util import private_files

__all__ = ["Checkpoint", "pack_directory", "unpack_directory"]

METADATA_FILE = ".tune_metadata.json"
LEGACY_METADATA_FILE = ".tune_metadata"  # a pickle: read only when trusted
DICT_JSON = "checkpoint_dict.json"
DICT_PICKLE = "checkpoint_dict.pkl"
TUNE_FILES = (METADATA_FILE, LEGACY_METADATA_FILE)


def write_dict(path: str | os.PathLike[str], data: Any) -> None:
    """Keep ``data`` in the directory ``path``: ``checkpoint_dict.json`` when it is plain
    JSON, else ``checkpoint_dict.pkl`` (mode 0600).

    Raises:
        UnsafeFileError: ``path`` is not this user's alone.
        pickle.PicklingError, TypeError: ``data`` can be neither.
    """
    root = Path(path)
    if json_exact(data):
        private_files.write_json(root / DICT_JSON, data)
    else:
        private_files.write_bytes(root / DICT_PICKLE, pickle.dumps(data))


def has_dict(path: str | os.PathLike[str]) -> bool:
    """Whether the directory ``path`` holds a dict written by :func:`write_dict`."""
    return any(os.path.lexists(os.path.join(path, n)) for n in (DICT_JSON, DICT_PICKLE))


def read_dict(path: str | os.PathLike[str], *, trusted: bool, opt_in: str) -> Any:
    """The dict :func:`write_dict` kept in ``path``; a pickled one only when ``trusted``.

    Raises:
        UntrustedPickleError: it is pickled and ``trusted`` is False.
        UnsafeFileError: the file is not this user's alone.
        FileNotFoundError: ``path`` holds neither file.
    """
    root = Path(path)
    if os.path.lexists(root / DICT_JSON):
        return load_data(root / DICT_JSON, trusted=False, opt_in=opt_in)
    if not os.path.lexists(root / DICT_PICKLE):
        raise FileNotFoundError(f"{root} holds no {DICT_JSON} nor {DICT_PICKLE}")
    if not trusted:
        raise UntrustedPickleError(root / DICT_PICKLE, opt_in)
    return load_data(root / DICT_PICKLE, trusted=True, opt_in=opt_in)


def pack_directory(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``path`` as ``{relative posix path: bytes}``."""
    root = Path(path)
    files: dict[str, bytes] = {}
    for file in sorted(root.rglob("*")):
        if file.is_file():
            files[file.relative_to(root).as_posix()] = file.read_bytes()
    return files


def unpack_directory(files: dict[str, bytes], path: str | os.PathLike[str]) -> str:
    """Write ``files`` (from :func:`pack_directory`) under ``path``; returns ``path``.

    Directories are made mode 0700 and files 0600 (:mod:`rayfield.util.private_files`).

    Raises:
        ValueError: a file would land outside ``path``.
        UnsafeFileError: ``path`` or a file in it is not this user's alone (or a symlink).
    """
    root = Path(path)
    private_files.ensure_private_dir(root)
    for rel, data in files.items():
        target = root / rel
        if root.resolve() not in target.resolve().parents:
            raise ValueError(f"checkpoint file {rel!r} would land outside {root}")
        if target.parent != root:
            private_files.ensure_private_dir(target.parent)
        with private_files.open_private(target, "wb") as f:
            f.write(data)
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
        # True when this process wrote the files, or Tune restored them from a blob it
        # checked: to_dict may then load a pickled dict without trusted=True.
        self._trusted = False

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
        """A checkpoint holding ``data`` in a fresh temporary directory (mode 0700):
        ``checkpoint_dict.json`` when it is plain JSON, else ``checkpoint_dict.pkl``."""
        import tempfile

        path = tempfile.mkdtemp(prefix="tune-checkpoint-")
        write_dict(path, data)
        checkpoint = cls(path)
        checkpoint._trusted = True
        return checkpoint

    def to_dict(self, *, trusted: bool = False) -> dict[str, Any]:
        """The dict given to :meth:`from_dict`.

        Args:
            trusted: load a pickled dict (``checkpoint_dict.pkl``) from a directory this
                process did not write. Not needed for the checkpoint
                ``tune.get_checkpoint()`` returns (Tune checked it before the restore) nor
                for one made by :meth:`from_dict` here.

        Raises:
            ValueError: the checkpoint was not made from a dict.
            UntrustedPickleError: the dict is pickled and the checkpoint is not trusted.
            UnsafeFileError: the file is not this user's alone.
        """
        if not has_dict(self.path):
            raise ValueError(f"checkpoint {self.path} was not created with from_dict()")
        opt_in = "Checkpoint.to_dict(trusted=True)"
        data: dict[str, Any] = read_dict(self.path, trusted=trusted or self._trusted, opt_in=opt_in)
        return data

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the files to ``path`` (default a new temporary directory); returns it."""
        import shutil
        import tempfile

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
