"""Per-trial result files, written on the driver: params.json, result.json, progress.csv.

``LoggerCallback`` (:mod:`rayfield.tune.logger_callback`, also importable from here) opens
one of each ``Logger`` class per trial when it starts and hands it the trial's results in
batches (:meth:`Logger.on_results`); the defaults are :class:`JsonLogger`
(``params.json``, ``params.pkl`` for a config JSON cannot hold, ``result.json``: one
JSON object per line),
:class:`CSVLogger` (``progress.csv``) and :class:`TBXLogger` (TensorBoard event files,
encoded without tensorboardX).

The trial directory is made mode 0700 and these files 0600, opened without following
symlinks (:mod:`rayfield.util.private_files`). ``params.pkl`` (the config with its Python
objects) is read back only with ``trusted=True`` (:func:`saved_config`); ``params.json``
and the experiment state hold the config as JSON.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import pickle
import struct
import threading
import time
from collections.abc import Sequence
from itertools import repeat
from typing import Any

from rayfield.tune import tbx
from rayfield.tune.lazy import lazy_getattr
from rayfield.tune.logger_encoding import (
    _PLAIN_CELLS,
    _cell,
    _clean,
    _flat_without_config,
    _json_line,
    _plain,
    flatten,
    json_lines,
)
from rayfield.tune.pickles import UntrustedPickleError, json_exact, load_pickle
from rayfield.tune.trial import Trial
from rayfield.util import private_files

__all__ = [
    "DEFAULT_LOGGERS",
    "CSVLogger",
    "JsonLogger",
    "Logger",
    "NoopLogger",
    "TBXLogger",
    "UnifiedLogger",
    "flatten",
    "pretty_print",
]

log = logging.getLogger(__name__)


# The trial directory a UnifiedLogger on this thread is opening its loggers in.
_opening = threading.local()

# LoggerCallback lives in rayfield.tune.logger_callback (imported on first use here).
__getattr__ = lazy_getattr(
    __name__, {"LoggerCallback": "rayfield.tune.logger_callback:LoggerCallback"}
)


class Logger:
    """One trial's writer. Subclasses override ``_init``, ``on_result`` and ``close``.

    Args:
        config: the trial's config.
        logdir: the trial's directory (created mode 0700).
        trial: the trial, when logging for the runner.

    Raises:
        UnsafeFileError: ``logdir`` or a directory above it is not this user's alone.
    """

    def __init__(self, config: dict[str, Any], logdir: str, trial: Trial | None = None) -> None:
        self.config = config
        self.logdir = logdir
        self.trial = trial
        if getattr(_opening, "logdir", None) != logdir:  # a UnifiedLogger's part: checked
            private_files.ensure_private_dir(logdir)
        # While it opens its files, the directory was just made private: the opens skip
        # the walk over the directories above (each file is still checked itself).
        self._fresh = True
        try:
            self._init()
        finally:
            self._fresh = False

    def _init(self) -> None:
        pass

    def on_result(self, result: dict[str, Any]) -> None:
        raise NotImplementedError

    def on_results(self, results: list[dict[str, Any]]) -> None:
        """Several results of the trial, in order (by default one :meth:`on_result` each;
        the built-in loggers encode a batch at once)."""
        for result in results:
            self.on_result(result)

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
    """``params.json`` (the config), ``params.pkl`` (only for a config JSON cannot hold
    exactly: functions, classes, tuples, numpy arrays...; readers take such a config from
    it only when trusted) and ``result.json`` (one line per result)."""

    def _init(self) -> None:
        self.update_config(self.config)
        self._file = private_files.open_private(
            os.path.join(self.logdir, "result.json"), "a", ancestors_checked=self._fresh
        )

    def on_result(self, result: dict[str, Any]) -> None:
        self._file.write(_json_line(result) + "\n")

    def on_results(self, results: list[dict[str, Any]]) -> None:
        if results:
            self._file.write(json_lines(results))

    def update_config(self, config: dict[str, Any]) -> None:
        self.config = config
        text = json.dumps(_clean(config), indent=2, sort_keys=True)
        fresh = getattr(self, "_fresh", False)  # (a subclass may call this before __init__)
        private_files.write_text(
            os.path.join(self.logdir, "params.json"), text, ancestors_checked=fresh
        )
        pkl = os.path.join(self.logdir, "params.pkl")
        if json_exact(config, numpy_scalars=True):  # params.json holds it: no pickle
            if not fresh:  # one an earlier config needed would be stale now
                try:
                    os.unlink(pkl)
                except FileNotFoundError:
                    pass
            return
        try:
            if _plain(config):
                data = pickle.dumps(config)
            else:  # functions and classes: cloudpickle keeps those of __main__ by value
                import cloudpickle

                data = cloudpickle.dumps(config)
        except Exception:  # an unpicklable config still has params.json
            return
        private_files.write_bytes(pkl, data, ancestors_checked=fresh)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class CSVLogger(Logger):
    """``progress.csv``: one row per result, columns from the first result (config left out,
    nested keys joined with ``/``); appends to an existing file after a resume."""

    def _init(self) -> None:
        path = os.path.join(self.logdir, "progress.csv")
        self._file = private_files.open_private(path, "a", ancestors_checked=self._fresh)
        self._continuing = os.fstat(self._file.fileno()).st_size > 0  # after a resume
        self._writer = csv.writer(self._file)
        self._columns: list[str] | None = None
        if self._continuing:
            with private_files.open_private(path, "r") as f:
                header = next(csv.reader(f), None)
            if header:
                self._columns = header

    def on_result(self, result: dict[str, Any]) -> None:
        self.on_flat_result(result, _flat_without_config(result))

    def on_results(self, results: list[dict[str, Any]]) -> None:
        self.on_flat_results([_flat_without_config(result) for result in results])

    def on_flat_result(self, result: dict[str, Any], row: dict[str, Any]) -> None:
        """:meth:`on_result` given ``row``, the result without its config, flattened."""
        self.on_flat_results([row])

    def on_flat_results(self, rows: list[dict[str, Any]]) -> None:
        """Several results without their config, flattened: one CSV row each."""
        if not rows:
            return
        if self._columns is None:
            self._columns = list(rows[0])
            self._writer.writerow(self._columns)
        columns = self._columns
        # Missing columns are empty and new ones left out (csv.DictWriter's "ignore").
        table = [list(map(row.get, columns, repeat(""))) for row in rows]
        floats = [v for cells in table for v in cells if type(v) is float]
        plain = math.isfinite(sum(floats)) and all(
            _PLAIN_CELLS.issuperset(map(type, cells)) for cells in table
        )
        if not plain:  # NaN, infinities or objects somewhere: clean every cell
            table = [[_cell(v) for v in cells] for cells in table]
        self._writer.writerows(table)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TBXLogger(Logger):
    """TensorBoard scalars ``ray/tune/<metric>`` at step ``timesteps_total`` or else
    ``training_iteration``.

    One TFRecord event per result holds all its scalars. The records are encoded by
    :mod:`rayfield.tune.tbx` (no tensorboardX, which would import torch into the driver;
    no writer thread per trial, no fsync), so thousands of short trials stay cheap.
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

        # Each result key's encoded Summary.Value up to its float; None: not a scalar.
        self._tags: dict[str, Any] = {}
        # Per result shape (its keys and their values' types): the scalar keys and their
        # tags, shared by the trials of a run (one class, one _SKIP).
        self._plans = _PLANS.setdefault((type(self), frozenset(self._SKIP)), {})
        self._shape: tuple[tuple[str, ...], tuple[type, ...]] | None = None  # the last one
        self._plan: tuple[list[str], list[bytes]] | None = None  # ... and its plan
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._file = private_files.open_private(
            os.path.join(self.logdir, name), "ab", ancestors_checked=self._fresh
        )
        self._file.write(tbx.record(tbx.encode_event(time.time(), file_version="brain.Event:2")))

    def on_result(self, result: dict[str, Any]) -> None:
        self.on_flat_result(result, _flat_without_config(result))

    def on_results(self, results: list[dict[str, Any]]) -> None:
        self.on_flat_results(results, [_flat_without_config(result) for result in results])

    def on_flat_result(self, result: dict[str, Any], flat: dict[str, Any]) -> None:
        """:meth:`on_result` given ``flat``, the result without its config, flattened
        (the config is no scalar: it is the trial's parameters, as in Ray)."""
        self.on_flat_results([result], [flat])

    def on_flat_results(self, results: list[dict[str, Any]], flats: list[dict[str, Any]]) -> None:
        """Several results, each with its flattened copy (see :meth:`on_flat_result`):
        one event record each, written at once."""
        records = []
        scalars_record = tbx.scalars_record
        for result, flat in zip(results, flats, strict=True):
            values = self._scalars(flat)
            if values:
                step = result.get("timesteps_total") or result.get("training_iteration", 0)
                records.append(scalars_record(time.time(), int(step), values))
        if records:
            self._file.write(b"".join(records))

    def _scalars(self, flat: dict[str, Any]) -> bytes:
        """The encoded ``Summary.Value`` fields of ``flat``'s finite numbers (bools and
        the keys of ``_SKIP`` left out)."""
        # A trial's results mostly have the same keys with the same types: then the
        # scalars are the same keys as last time, encoded in C (unless one is not finite
        # or beyond a float32's range).
        shape = (tuple(flat), tuple(map(type, flat.values())))
        if shape == self._shape:  # as the trial's last result
            plan = self._plan
        else:
            plan = self._plans.get(shape)
            self._shape, self._plan = shape, plan
        if plan is not None:
            numbers = list(map(flat.__getitem__, plan[0]))
            try:
                if math.isfinite(sum(numbers)):
                    return b"".join(map(bytes.__add__, plan[1], map(_FLOAT.pack, numbers)))
            except (OverflowError, struct.error):  # value by value below
                pass
        elif _PLAIN_CELLS.issuperset(shape[1]) and len(self._plans) < 64:  # no numpy numbers
            keys = [k for k, v in flat.items() if type(v) in _NUMBERS and k not in self._SKIP]
            self._plans[shape] = self._plan = (keys, [_scalar_prefix(key) for key in keys])
        return self._encode_each(flat)

    def _encode_each(self, flat: dict[str, Any]) -> bytes:
        """:meth:`_scalars`, value by value."""
        tags = self._tags
        values = []
        for key, value in flat.items():
            kind = type(value)
            if kind is float:
                if value - value != 0.0:  # NaN or an infinity
                    continue
            elif kind is not int and (
                kind is bool or not isinstance(value, (int, float)) or not _finite(value)
            ):
                continue
            prefix = tags.get(key, _UNSEEN)
            if prefix is _UNSEEN:
                prefix = None if key in self._SKIP else _scalar_prefix(key)
                if len(tags) < 10_000:
                    tags[key] = prefix
            if prefix is not None:
                values.append(prefix + _float32(value))
        return b"".join(values)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# The encoded Summary.Value up to its float, by result key (the same keys recur).
_SCALAR_PREFIXES: dict[str, bytes] = {}
_FLOAT = struct.Struct("<f")
_UNSEEN = object()
_PLANS: dict[tuple[type, frozenset[str]], dict[Any, tuple[list[str], list[bytes]]]] = {}
_NUMBERS = frozenset({int, float})


def _finite(value: Any) -> bool:
    """``math.isfinite`` for any number; an int too large for a float counts as finite
    (it is written as a float32 infinity)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return True


def _float32(value: float) -> bytes:
    """``value`` as a little-endian float32; beyond its range, the infinity of its sign
    (what numpy's and so tensorboardX's conversion gives)."""
    try:
        return _FLOAT.pack(value)
    except (OverflowError, struct.error):  # struct.error: an int beyond a double's range
        return _FLOAT.pack(math.inf if value > 0 else -math.inf)


def _scalar_prefix(key: str) -> bytes:
    """The encoded ``Summary.Value`` of tag ``ray/tune/<key>`` up to its float."""
    prefix = _SCALAR_PREFIXES.get(key)
    if prefix is None:
        prefix = tbx.scalar_prefix(f"ray/tune/{key}")
        if len(_SCALAR_PREFIXES) < 10_000:
            _SCALAR_PREFIXES[key] = prefix
    return prefix


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
        # The directory was just made private (Logger.__init__): its parts skip the check.
        _opening.logdir = self.logdir
        try:
            for cls in self._classes:
                try:
                    self._loggers.append(cls(self.config, self.logdir, self.trial))
                except Exception as exc:
                    log.warning("could not start logger %s: %s", cls.__name__, exc)
        finally:
            _opening.logdir = None

    def on_result(self, result: dict[str, Any]) -> None:
        self.on_results([result])

    def on_results(self, results: list[dict[str, Any]]) -> None:
        flats: list[dict[str, Any]] | None = None  # flattened once for those that take it
        for logger in self._loggers:
            if isinstance(logger, (CSVLogger, TBXLogger)):
                if flats is None:
                    flats = [_flat_without_config(result) for result in results]
                if isinstance(logger, CSVLogger):
                    logger.on_flat_results(flats)
                else:
                    logger.on_flat_results(results, flats)
            else:
                logger.on_results(results)

    def update_config(self, config: dict[str, Any]) -> None:
        for logger in self._loggers:
            logger.update_config(config)

    def flush(self) -> None:
        for logger in self._loggers:
            logger.flush()

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


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


def load_pickled_config(logdir: str, *, trusted: bool = False) -> dict[str, Any] | None:
    """The config saved in ``<logdir>/params.pkl``, or None when there is none or it
    cannot be loaded.

    Args:
        logdir: the trial's directory.
        trusted: the directory is yours; without it the pickle is never loaded.

    Raises:
        UntrustedPickleError: there is a ``params.pkl`` and ``trusted`` is False.
    """
    path = os.path.join(logdir, "params.pkl")
    if not os.path.lexists(path):
        return None
    try:
        data: dict[str, Any] = load_pickle(path, trusted=trusted, opt_in="trusted=True")
    except UntrustedPickleError:
        raise
    except Exception:
        return None
    return data


def saved_config(
    data: dict[str, Any], *, trusted: bool, opt_in: str, strict: bool
) -> dict[str, Any] | None:
    """The config of a saved trial (``trial_to_json``'s ``data``) with its Python objects,
    or None when its JSON copy (``data["config"]``) is the config.

    A config that JSON holds exactly (``"config_pickled": false`` in the state) is taken
    from JSON and ``params.pkl`` is not read. Otherwise the JSON copy has strings for
    what JSON cannot hold, and the original is in ``params.pkl``: it is loaded when
    ``trusted``; else ``strict`` raises and a lenient reader gets the JSON copy (with a
    warning). State written before ``config_pickled`` existed loads ``params.pkl`` only
    when ``trusted``.

    Raises:
        UntrustedPickleError: ``strict``, the config needs ``params.pkl``, and it is not
            ``trusted``.
    """
    pickled = data.get("config_pickled")
    if pickled is False or not data.get("logdir"):
        return None
    path = os.path.join(data["logdir"], "params.pkl")
    if trusted:
        try:
            return load_pickled_config(data["logdir"], trusted=True)
        except OSError as exc:  # e.g. UnsafeFileError: not this user's
            if strict:
                raise
            trial_id = data.get("trial_id")
            log.warning("config of trial %s not loaded from %s: %s", trial_id, path, exc)
            return None
    if pickled:
        if strict:
            raise UntrustedPickleError(path, opt_in)
        log.warning(
            "trial %s: its config has values JSON cannot hold; they are shown as strings "
            "because %s is a pickle, loaded only with %s",
            data.get("trial_id"),
            path,
            opt_in,
        )
    return None
