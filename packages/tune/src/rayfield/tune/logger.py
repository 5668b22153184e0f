"""Per-trial result files, written on the driver: params.json, result.json, progress.csv.

``LoggerCallback`` opens one of each ``Logger`` class per trial when it starts; the
defaults are :class:`JsonLogger` (``params.json``, ``params.pkl``, ``result.json``: one JSON
object per line), :class:`CSVLogger` (``progress.csv``) and, when tensorboardX is installed,
:class:`TBXLogger` (TensorBoard event files).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import pickle
import time
from collections.abc import Sequence
from typing import Any

from rayfield.tune.callback import Callback
from rayfield.tune.trial import Trial

__all__ = [
    "DEFAULT_LOGGERS",
    "CSVLogger",
    "JsonLogger",
    "Logger",
    "LoggerCallback",
    "NoopLogger",
    "TBXLogger",
    "UnifiedLogger",
    "pretty_print",
]

log = logging.getLogger(__name__)


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy -> Python, other objects -> str."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return str(value)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    return str(value)


def flatten(d: dict[str, Any], delimiter: str = "/", prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, delimiter, name + delimiter))
        else:
            out[name] = value
    return out


class Logger:
    """One trial's writer. Subclasses override ``_init``, ``on_result`` and ``close``.

    Args:
        config: the trial's config.
        logdir: the trial's directory (created).
        trial: the trial, when logging for the runner.
    """

    def __init__(self, config: dict[str, Any], logdir: str, trial: Trial | None = None) -> None:
        self.config = config
        self.logdir = logdir
        self.trial = trial
        os.makedirs(logdir, exist_ok=True)
        self._init()

    def _init(self) -> None:
        pass

    def on_result(self, result: dict[str, Any]) -> None:
        raise NotImplementedError

    def update_config(self, config: dict[str, Any]) -> None:
        self.config = config

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class NoopLogger(Logger):
    def on_result(self, result: dict[str, Any]) -> None:
        pass


class JsonLogger(Logger):
    """``params.json``/``params.pkl`` (the config) and ``result.json`` (one line per result)."""

    def _init(self) -> None:
        self.update_config(self.config)
        self._file = open(os.path.join(self.logdir, "result.json"), "a")  # noqa: SIM115

    def on_result(self, result: dict[str, Any]) -> None:
        try:  # the common case: plain JSON values, no NaN
            line = json.dumps(result, allow_nan=False, default=_json_default)
        except (TypeError, ValueError):
            line = json.dumps(_clean(result))
        self._file.write(line + "\n")

    def update_config(self, config: dict[str, Any]) -> None:
        self.config = config
        with open(os.path.join(self.logdir, "params.json"), "w") as f:
            json.dump(_clean(config), f, indent=2, sort_keys=True)
        try:
            import cloudpickle

            with open(os.path.join(self.logdir, "params.pkl"), "wb") as f:
                cloudpickle.dump(config, f)
        except Exception:  # an unpicklable config still has params.json
            pass

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class CSVLogger(Logger):
    """``progress.csv``: one row per result, columns from the first result (config left out,
    nested keys joined with ``/``); appends to an existing file after a resume."""

    def _init(self) -> None:
        path = os.path.join(self.logdir, "progress.csv")
        self._continuing = os.path.exists(path) and os.path.getsize(path) > 0
        self._file = open(path, "a", newline="")  # noqa: SIM115
        self._writer: csv.DictWriter[str] | None = None
        if self._continuing:
            with open(path, newline="") as f:
                header = next(csv.reader(f), None)
            if header:
                self._writer = csv.DictWriter(self._file, header, extrasaction="ignore")

    def on_result(self, result: dict[str, Any]) -> None:
        row = flatten({k: v for k, v in result.items() if k != "config"})
        if self._writer is None:
            self._writer = csv.DictWriter(self._file, list(row), extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerow({k: _clean(v) for k, v in row.items()})

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TBXLogger(Logger):
    """TensorBoard scalars ``ray/tune/<metric>`` at step ``timesteps_total`` or else
    ``training_iteration`` (needs ``pip install rayfield-tune[tensorboard]``).

    One TFRecord event per result holds all its scalars; records are written directly
    with tensorboardX's protos and checksum (no writer thread per trial, no fsync), so
    thousands of short trials stay cheap.
    """

    _SKIP = {
        "config",
        "pid",
        "timestamp",
        "time_total_s",
        "training_iteration",
        "date",
        "hostname",
        "node_ip",
        "trial_id",
        "experiment_id",
        "done",
    }

    def _init(self) -> None:
        import socket

        from tensorboardX.crc32c import crc32c
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        self._crc32c, self._event_cls, self._summary_cls = crc32c, Event, Summary
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._file = open(os.path.join(self.logdir, name), "ab")  # noqa: SIM115
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _masked_crc(self, data: bytes) -> bytes:
        import struct

        crc = self._crc32c(data)
        return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    def _write(self, event: Any) -> None:
        import struct

        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + self._masked_crc(header) + data + self._masked_crc(data))

    def on_result(self, result: dict[str, Any]) -> None:
        step = result.get("timesteps_total") or result.get("training_iteration", 0)
        values = [
            self._summary_cls.Value(tag=f"ray/tune/{key}", simple_value=float(value))
            for key, value in flatten(result).items()
            if key not in self._SKIP
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
        ]
        if values:
            summary = self._summary_cls(value=values)
            self._write(self._event_cls(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _tbx_available() -> bool:
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        return False
    return True


DEFAULT_LOGGERS: tuple[type[Logger], ...] = (JsonLogger, CSVLogger, TBXLogger)


class UnifiedLogger(Logger):
    """Fans results out to several loggers (those that fail to start are skipped)."""

    def __init__(
        self,
        config: dict[str, Any],
        logdir: str,
        trial: Trial | None = None,
        loggers: Sequence[type[Logger]] | None = None,
    ) -> None:
        self._classes = list(loggers if loggers is not None else DEFAULT_LOGGERS)
        super().__init__(config, logdir, trial)

    def _init(self) -> None:
        self._loggers: list[Logger] = []
        for cls in self._classes:
            if cls is TBXLogger and not _tbx_available():
                continue
            try:
                self._loggers.append(cls(self.config, self.logdir, self.trial))
            except Exception as exc:
                log.warning("could not start logger %s: %s", cls.__name__, exc)

    def on_result(self, result: dict[str, Any]) -> None:
        for logger in self._loggers:
            logger.on_result(result)

    def update_config(self, config: dict[str, Any]) -> None:
        for logger in self._loggers:
            logger.update_config(config)

    def flush(self) -> None:
        for logger in self._loggers:
            logger.flush()

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class LoggerCallback(Callback):
    """Writes each trial's files and its ``error_<n>.txt`` files (flushes at most every
    ``flush_interval_s``)."""

    def __init__(
        self, loggers: Sequence[type[Logger]] | None = None, flush_interval_s: float = 1.0
    ) -> None:
        self.loggers = loggers
        self.flush_interval_s = flush_interval_s
        self._open: dict[str, UnifiedLogger] = {}
        self._last_flush = 0.0

    def _logger(self, trial: Trial) -> UnifiedLogger:
        logger = self._open.get(trial.trial_id)
        if logger is None:
            logger = UnifiedLogger(trial.config, trial.logdir, trial, self.loggers)
            self._open[trial.trial_id] = logger
        return logger

    def on_trial_start(self, trial: Trial) -> None:
        if trial.logdir:
            self._logger(trial)

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> None:
        if not trial.logdir:
            return
        self._logger(trial).on_result(result)
        now = time.monotonic()
        if now - self._last_flush > self.flush_interval_s:
            self._last_flush = now
            for logger in self._open.values():
                logger.flush()

    def on_trial_reset(self, trial: Trial) -> None:
        if trial.logdir:
            self._logger(trial).update_config(trial.config)

    def on_trial_error(self, trial: Trial, error: str) -> None:
        if not trial.logdir:
            return
        os.makedirs(trial.logdir, exist_ok=True)
        path = os.path.join(trial.logdir, f"error_{trial.num_failures}.txt")
        with open(path, "w") as f:
            f.write(error)
        trial.error_file = path

    def on_trial_complete(self, trial: Trial) -> None:
        logger = self._open.pop(trial.trial_id, None)
        if logger is not None:
            logger.close()

    def on_checkpoint(self) -> None:
        # The saved state must never be ahead of the result files.
        for logger in self._open.values():
            logger.flush()

    def on_experiment_end(self, trials: list[Trial]) -> None:
        for logger in self._open.values():
            logger.close()
        self._open.clear()


def pretty_print(result: dict[str, Any]) -> str:
    """A result as indented ``key: value`` lines (config and None values left out)."""
    lines = []

    def walk(d: dict[str, Any], indent: int) -> None:
        for key in sorted(d):
            value = d[key]
            if key == "config" or value is None:
                continue
            if isinstance(value, dict):
                lines.append(" " * indent + f"{key}:")
                walk(value, indent + 2)
            else:
                lines.append(" " * indent + f"{key}: {value}")

    walk(_clean(result), 0)
    return "\n".join(lines) + "\n"


def load_pickled_config(logdir: str) -> dict[str, Any] | None:
    """The config saved in ``params.pkl``, or None."""
    path = os.path.join(logdir, "params.pkl")
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            data: dict[str, Any] = pickle.load(f)
        return data
    except Exception:
        return None
