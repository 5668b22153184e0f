"""Checkpoint files: torch state dicts plus JSON, never pickled objects.

A checkpoint is a directory ``checkpoint_<N>/`` (mode 0700) with these files (0600),
each written whole (a temporary file renamed over it) through
:mod:`rayfield.util.private_files`:

* ``policy_state.pt``: the local worker's state (model and optimizer state dicts,
  filter statistics as lists, numbers), written by ``torch.save`` and read with
  ``torch.load(weights_only=True)``, which refuses anything but tensors and plain
  containers;
* ``algorithm_state.json``: the algorithm's name, its config (gymnasium spaces, e.g.
  those of ``multiagent.policies``, as ``{"__space__": ...}`` descriptions; other
  values that are not JSON, such as callback classes or the policy mapping
  function, are recorded by name only and never imported back) and counters;
* ``rllib_checkpoint.json``: the format version;
* ``checkpoint-<N>``: the file `Trainer.save` returns (classic layout); it holds
  the same JSON as ``algorithm_state.json``.

Reading one checks that this user owns the directory and the files it reads and that
neither group nor others can write them (nor the directories above); a symlink or a
file of another user is refused with :class:`rayfield.exceptions.UnsafeFileError`.
Nothing read is unpickled: ``policy_state.pt`` loads with ``weights_only=True``.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from rayfield.util import private_files

STATE_FILE = "policy_state.pt"
ALGO_FILE = "algorithm_state.json"
META_FILE = "rllib_checkpoint.json"
FORMAT = {"type": "Algorithm", "checkpoint_version": "1.0", "format": "rayfield-rllib"}
UNSERIALIZABLE = "__unserializable__"
SPACE = "__space__"


def space_to_json(space: Any) -> Any:
    """A JSON description of a gymnasium space (Discrete, Box, MultiDiscrete,
    MultiBinary, Tuple, Dict), or None for anything else."""
    try:
        from gymnasium import spaces
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        return None
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": space.n}
    if isinstance(space, spaces.Tuple):
        parts = [space_to_json(s) for s in space.spaces]
        return None if any(p is None for p in parts) else {"type": "Tuple", "spaces": parts}
    if isinstance(space, spaces.Dict):
        items = {k: space_to_json(s) for k, s in space.spaces.items()}
        if any(v is None for v in items.values()):
            return None
        return {"type": "Dict", "spaces": items}
    return None


def space_from_json(desc: dict[str, Any]) -> Any:
    """The space `space_to_json` described.

    Raises:
        ValueError: an unknown space type.
    """
    import numpy as np
    from gymnasium import spaces

    kind = desc.get("type")
    if kind == "Discrete":
        return spaces.Discrete(desc["n"], start=desc.get("start", 0))
    if kind == "Box":
        dtype = np.dtype(desc["dtype"])
        low = np.asarray(desc["low"], dtype=dtype)
        high = np.asarray(desc["high"], dtype=dtype)
        return spaces.Box(low, high, tuple(desc["shape"]), dtype)
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(desc["nvec"])
    if kind == "MultiBinary":
        return spaces.MultiBinary(desc["n"])
    if kind == "Tuple":
        return spaces.Tuple([space_from_json(s) for s in desc["spaces"]])
    if kind == "Dict":
        return spaces.Dict({k: space_from_json(s) for k, s in desc["spaces"].items()})
    raise ValueError(f"unknown space description in a checkpoint: {desc!r}")


def restore_spaces(value: Any) -> Any:
    """`value` with every ``{"__space__": ...}`` turned back into its space."""
    if isinstance(value, dict):
        if SPACE in value:
            return space_from_json(value[SPACE])
        return {k: restore_spaces(v) for k, v in value.items()}
    if isinstance(value, list):
        return [restore_spaces(v) for v in value]
    return value


def to_json_safe(value: Any) -> Any:
    """`value` with everything that is not JSON replaced by ``{"__unserializable__": repr}``."""
    if isinstance(value, dict):
        return {str(k): to_json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    space = space_to_json(value)
    if space is not None:
        return {SPACE: space}
    name = getattr(value, "__qualname__", None) or repr(value)
    return {UNSERIALIZABLE: f"{getattr(value, '__module__', '')}.{name}"}


def drop_unserializable(config: dict[str, Any]) -> dict[str, Any]:
    """The config without the values `to_json_safe` could not keep (entries of
    ``multiagent.policies`` keep their place as None: the default policy class),
    with its spaces restored."""
    out = {}
    for k, v in config.items():
        if isinstance(v, dict) and UNSERIALIZABLE in v:
            continue
        if k == "policies" and isinstance(v, dict):
            v = {
                pid: [None if isinstance(x, dict) and UNSERIALIZABLE in x else x for x in spec]
                if isinstance(spec, list)
                else spec
                for pid, spec in v.items()
            }
        out[k] = drop_unserializable(v) if isinstance(v, dict) else v
    return restore_spaces(out)


def unserializable_name(value: Any) -> str | None:
    """The recorded name of a value `to_json_safe` could not keep, else None."""
    if isinstance(value, dict) and UNSERIALIZABLE in value:
        return str(value[UNSERIALIZABLE])
    return None


def write(
    directory: Path, iteration: int, worker_state: dict[str, Any], algo_state: dict[str, Any]
) -> str:
    """Write a checkpoint for `iteration` under `directory`; return the
    ``checkpoint-<N>`` file path.

    ``directory/checkpoint_<N>`` (and any missing directory above it) is made 0700,
    its files 0600.

    Raises:
        UnsafeFileError: the checkpoint directory or one above it is another user's,
            or others can write it (see `rayfield.util.private_files`).
    """
    import torch

    ckpt = private_files.ensure_private_dir(
        directory / f"checkpoint_{iteration}", what="the checkpoint directory"
    )
    with private_files.atomic_write(ckpt / STATE_FILE) as f:
        torch.save(worker_state, f)
    text = json.dumps(algo_state, indent=1, sort_keys=True, allow_nan=True)
    private_files.write_text(ckpt / ALGO_FILE, text)
    private_files.write_json(ckpt / META_FILE, FORMAT)
    private_files.write_text(ckpt / f"checkpoint-{iteration}", text)
    return str(ckpt / f"checkpoint-{iteration}")


def checkpoint_dir(path: str | os.PathLike[str]) -> Path:
    """The checkpoint directory for a directory or a ``checkpoint-<N>`` file.

    Raises:
        FileNotFoundError: no ``policy_state.pt`` there.
        UnsafeFileError: the directory is another user's (or a symlink of another
            user), or group or others can write it.
    """
    p = Path(path)
    if p.is_file():
        p = p.parent
    if not (p / STATE_FILE).exists():
        raise FileNotFoundError(
            f"{path} is not a rayfield-rllib checkpoint (no {STATE_FILE}); pass the path "
            "that save() returned or its directory"
        )
    private_files.check_owned(p, "the checkpoint directory")
    return p


def read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(worker_state, algo_state)`` of a checkpoint; tensors and JSON only, no code runs.

    Raises:
        FileNotFoundError: not a checkpoint (see `checkpoint_dir`).
        UnsafeFileError: the directory or a file read fails the ownership checks of
            `rayfield.util.private_files` (a symlink, another user's, writable by others).
    """
    import torch

    d = checkpoint_dir(path)
    data = private_files.read_bytes(d / STATE_FILE, what="the checkpoint's policy state")
    worker_state = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    algo_state = private_files.read_json(d / ALGO_FILE, what="the checkpoint's algorithm state")
    return worker_state, algo_state
