"""The result files ``rllib train`` leaves in a trial directory when it runs the trial
itself (without Tune), as Tune's loggers do: ``result.json`` (one JSON object per
iteration), ``progress.csv`` (one row per iteration, columns from the first result,
nested keys joined with ``/``) and a TensorBoard event file (scalars ``ray/tune/<key>``
at step ``timesteps_total``). Every file is 0600 (`rayfield.util.private_files`).

The TensorBoard records are tensorboardX's ``Event`` protobufs, framed as TFRecords and
written through a private file (tensorboardX's own writer opens its files itself).
"""

from __future__ import annotations

import csv
import json
import math
import socket
import struct
import time
from pathlib import Path
from typing import Any

from rayfield.rllib.agents.checkpoints import to_json_safe
from rayfield.util import private_files

__all__ = ["LogDir", "ResultFiles", "evaluate_command", "flatten"]

_TB_SKIP = {"config", "pid", "timestamp", "date", "hostname", "done", "training_iteration"}


def flatten(result: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level, keys joined with ``/``."""
    out: dict[str, Any] = {}
    for k, v in result.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, f"{key}/"))
        else:
            out[key] = v
    return out


class LogDir:
    """What ``rllib train`` and the Tune trainables give a trainer as its
    ``logger_creator(config)``: the trial directory as ``logdir`` (the results themselves
    are written by `ResultFiles` or Tune's loggers)."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir


def evaluate_command(checkpoint: str, run: str, env: Any) -> str:
    """The ``rllib evaluate`` command line of a checkpoint (printed after training)."""
    import shlex

    path, env_arg = shlex.quote(str(checkpoint)), shlex.quote(str(env))
    return f"rllib evaluate {path} --algo {run} --env {env_arg}"


def _tf_record(data: bytes) -> bytes:
    from tensorboardX.record_writer import masked_crc32c

    header = struct.pack("<Q", len(data))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


class ResultFiles:
    """Appends each result to the three files of a trial directory.

    Args:
        trial_dir: an existing private directory (made by the caller).

    Raises:
        UnsafeFileError: a file there is another user's or a symlink.
    """

    def __init__(self, trial_dir: Path) -> None:
        from tensorboardX.proto.event_pb2 import Event

        self.trial_dir = Path(trial_dir)
        self._json = private_files.open_private(self.trial_dir / "result.json", "a")
        self._csv_file = private_files.open_private(self.trial_dir / "progress.csv", "a")
        self._csv: csv.DictWriter[str] | None = None
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._tb = private_files.open_private(self.trial_dir / name, "ab")
        first = Event(wall_time=time.time(), file_version="brain.Event:2")
        self._tb.write(_tf_record(first.SerializeToString()))

    def write(self, result: dict[str, Any]) -> None:
        """Append one iteration's result (``config`` left out) to every file."""
        row = to_json_safe({k: v for k, v in result.items() if k != "config"})
        self._json.write(json.dumps(row) + "\n")
        flat = flatten(row)
        if self._csv is None:
            self._csv = csv.DictWriter(self._csv_file, list(flat), extrasaction="ignore")
            self._csv.writeheader()
        self._csv.writerow(
            {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in flat.items()}
        )
        self._write_scalars(flat)
        for f in (self._json, self._csv_file, self._tb):
            f.flush()

    def _write_scalars(self, flat: dict[str, Any]) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        step = int(flat.get("timesteps_total") or flat.get("training_iteration") or 0)
        values = [
            Summary.Value(tag=f"ray/tune/{k}", simple_value=float(v))
            for k, v in flat.items()
            if k not in _TB_SKIP
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and math.isfinite(v)
        ]
        event = Event(wall_time=time.time(), step=step, summary=Summary(value=values))
        self._tb.write(_tf_record(event.SerializeToString()))

    def close(self) -> None:
        for f in (self._json, self._csv_file, self._tb):
            f.close()
