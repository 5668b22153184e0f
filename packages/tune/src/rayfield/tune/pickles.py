"""Pickles Tune writes, and reads only when told to trust them.

Tune keeps what JSON can hold as JSON: checkpoint metadata (``.tune_metadata.json``), a
checkpoint dict of plain values (``checkpoint_dict.json``), configs (``params.json``) and
the experiment state. A user's own objects that JSON cannot hold (a config with
functions or classes, a checkpoint dict of numpy arrays, a searcher's state) are
pickled: ``params.pkl``, ``checkpoint_dict.pkl``, a searcher's ``save`` file.

Unpickling a file runs whatever code its author put in it. A directory another user
could have made or changed, an experiment copied from elsewhere, a download: any of them
can hold such a file. So Tune unpickles only when the API that reads it is called with
``trusted=True`` (``ExperimentAnalysis(path, trusted=True)``,
``tune.run(..., resume=True, trusted=True)``, ``Tuner.restore(path, f, trusted=True)``,
``Trainable.restore(path, trusted=True)``, ``Checkpoint.to_dict(trusted=True)``,
``Searcher.restore(path, trusted=True)``), and then only from a file of this user that
no one else can write (:func:`rayfield.util.private_files.read_bytes`). Without it, a
pickle it would need raises :class:`UntrustedPickleError`, naming the file and the
opt-in. Pickles this process made itself in this run (a checkpoint kept in memory or
written by this driver) need no opt-in.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

from rayfield.tune.error import TuneError
from rayfield.util import private_files

__all__ = ["UntrustedPickleError", "dump_data", "json_exact", "load_data", "load_pickle"]

_MAX_DEPTH = 200


class UntrustedPickleError(TuneError):
    """Tune would need to unpickle a file it was not told to trust.

    Args:
        path: the file holding the pickle.
        opt_in: how the caller says it trusts the file (e.g. ``trusted=True``).
    """

    def __init__(self, path: str | os.PathLike[str], opt_in: str) -> None:
        self.path = str(path)
        self.opt_in = opt_in
        super().__init__(
            f"{self.path} holds a pickle, and loading a pickle runs any code its author put "
            f"in it; rayfield-tune loads one only when told the file is trusted. If you "
            f"(or your own run) wrote it, pass {opt_in}; never do so for a directory "
            "someone else made, copied or could write"
        )


def _numpy_scalar(value: Any) -> bool:
    return (
        type(value).__module__ == "numpy"
        and type(value).__name__ != "ndarray"
        and getattr(value, "shape", None) == ()
        and type(value.item()) in (int, float, bool)
    )


def json_exact(value: Any, depth: int = 0, *, numpy_scalars: bool = False) -> bool:
    """True when ``value`` comes back equal and of the same types through JSON: dicts
    with str keys, lists, str, int, float, bool and None (tuples, numpy values and other
    objects do not). With ``numpy_scalars``, numpy numbers count too (they come back as
    the equal Python number)."""
    if depth > _MAX_DEPTH:
        return False
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is list:
        return all(json_exact(v, depth + 1, numpy_scalars=numpy_scalars) for v in value)
    if type(value) is dict:
        return all(
            type(k) is str and json_exact(v, depth + 1, numpy_scalars=numpy_scalars)
            for k, v in value.items()
        )
    return numpy_scalars and _numpy_scalar(value)


def load_pickle(path: str | os.PathLike[str], *, trusted: bool, opt_in: str) -> Any:
    """The object pickled in ``path``, loaded only when ``trusted``.

    Args:
        path: the pickle file.
        trusted: the caller's opt-in; the file must also be this user's alone.
        opt_in: the opt-in to name in the error.

    Raises:
        UntrustedPickleError: ``trusted`` is False.
        UnsafeFileError: the file (or a directory above it) fails the ownership check.
        FileNotFoundError: it does not exist.
    """
    if not trusted:
        raise UntrustedPickleError(path, opt_in)
    return _trusted_loads(private_files.read_bytes(path), path, trusted, opt_in)


def _trusted_loads(data: bytes, path: str | os.PathLike[str], trusted: bool, opt_in: str) -> Any:
    """The one place Tune unpickles: ``data`` read from ``path``, only when ``trusted``.

    Raises:
        UntrustedPickleError: ``trusted`` is False.
    """
    if not trusted:
        raise UntrustedPickleError(path, opt_in)
    return pickle.loads(data)


def dump_data(path: str | os.PathLike[str], value: Any) -> str:
    """Write ``value`` to ``path`` (mode 0600, atomically) as JSON when
    :func:`json_exact`, else as a pickle; returns ``"json"`` or ``"pickle"``.

    Raises:
        UnsafeFileError: the directory is not this user's alone.
        pickle.PicklingError, TypeError: ``value`` cannot be pickled.
    """
    if json_exact(value):
        private_files.write_json(path, value)
        return "json"
    private_files.write_bytes(path, pickle.dumps(value))
    return "pickle"


def load_data(path: str | os.PathLike[str], *, trusted: bool, opt_in: str) -> Any:
    """What :func:`dump_data` wrote: JSON as is, a pickle only when ``trusted``.

    Raises:
        UntrustedPickleError: the file holds a pickle and ``trusted`` is False.
        UnsafeFileError: the file fails the ownership check.
        FileNotFoundError: it does not exist.
    """
    data = private_files.read_bytes(path)
    if data[:1] == b"\x80":  # pickle protocols 2 and later start with PROTO
        return _trusted_loads(data, path, trusted, opt_in)
    try:
        return json.loads(data)
    except ValueError:
        raise TuneError(f"{path} holds neither JSON nor a pickle Tune wrote") from None
