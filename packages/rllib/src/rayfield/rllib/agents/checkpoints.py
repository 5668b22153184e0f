"""Checkpoint files: torch state dicts plus JSON, never pickled objects.

A checkpoint is a directory ``checkpoint_<N>/`` with

* ``policy_state.pt``: the local worker's state (model and optimizer state dicts,
  filter statistics as lists, numbers), written by ``torch.save`` and read with
  ``torch.load(weights_only=True)``, which refuses anything but tensors and plain
  containers;
* ``algorithm_state.json``: the algorithm's name, its config (values that are not
  JSON, such as callback classes, are recorded by name only) and counters;
* ``rllib_checkpoint.json``: the format version;
* ``checkpoint-<N>``: the file `Trainer.save` returns (classic layout); it holds
  the same JSON as ``algorithm_state.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STATE_FILE = "policy_state.pt"
ALGO_FILE = "algorithm_state.json"
META_FILE = "rllib_checkpoint.json"
FORMAT = {"type": "Algorithm", "checkpoint_version": "1.0", "format": "rayfield-rllib"}
UNSERIALIZABLE = "__unserializable__"


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
    name = getattr(value, "__qualname__", None) or repr(value)
    return {UNSERIALIZABLE: f"{getattr(value, '__module__', '')}.{name}"}


def drop_unserializable(config: dict[str, Any]) -> dict[str, Any]:
    """The config without the values `to_json_safe` could not keep."""
    out = {}
    for k, v in config.items():
        if isinstance(v, dict) and UNSERIALIZABLE in v:
            continue
        out[k] = drop_unserializable(v) if isinstance(v, dict) else v
    return out


def write(
    directory: Path, iteration: int, worker_state: dict[str, Any], algo_state: dict[str, Any]
) -> str:
    """Write a checkpoint for `iteration` under `directory`; return the
    ``checkpoint-<N>`` file path."""
    import torch

    ckpt = directory / f"checkpoint_{iteration}"
    ckpt.mkdir(parents=True, exist_ok=True)
    torch.save(worker_state, ckpt / STATE_FILE)
    text = json.dumps(algo_state, indent=1, sort_keys=True, allow_nan=True)
    (ckpt / ALGO_FILE).write_text(text)
    (ckpt / META_FILE).write_text(json.dumps(FORMAT))
    (ckpt / f"checkpoint-{iteration}").write_text(text)
    return str(ckpt / f"checkpoint-{iteration}")


def checkpoint_dir(path: str | os.PathLike[str]) -> Path:
    """The checkpoint directory for a directory or a ``checkpoint-<N>`` file.

    Raises:
        FileNotFoundError: no ``policy_state.pt`` there.
    """
    p = Path(path)
    if p.is_file():
        p = p.parent
    if not (p / STATE_FILE).exists():
        raise FileNotFoundError(
            f"{path} is not a rayfield-rllib checkpoint (no {STATE_FILE}); pass the path "
            "that save() returned or its directory"
        )
    return p


def read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(worker_state, algo_state)`` of a checkpoint; tensors only, no code runs."""
    import torch

    d = checkpoint_dir(path)
    worker_state = torch.load(d / STATE_FILE, weights_only=True, map_location="cpu")
    algo_state = json.loads((d / ALGO_FILE).read_text())
    return worker_state, algo_state
