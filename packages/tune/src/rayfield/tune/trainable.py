"""The class API: ``Trainable`` with the classic and the modern hooks.

Tune calls ``train()`` once per iteration; it runs the user's ``step()`` (classic
``_train()``) and fills in the fields of :mod:`rayfield.tune.result`. ``save_to_object``
and ``restore_from_object`` move a checkpoint as a blob (see :mod:`rayfield.tune.checkpoint`),
so the driver stores it and any actor can restore it.

A checkpoint saved as a dict is kept as JSON when its values are plain JSON, else pickled.
A blob is trusted as it is (it comes from ``save_to_object`` or from
:func:`read_checkpoint_dir`, which refuses pickles unless told ``trusted=True``);
``restore(path)`` reads a directory and needs ``trusted=True`` for pickles in it.

Hook pairs (a subclass overrides either spelling):

========================  ========================
modern                    classic
========================  ========================
``setup(config)``         ``_setup(config)``
``step()``                ``_train()``
``save_checkpoint(dir)``  ``_save(dir)``
``load_checkpoint(c)``    ``_restore(c)``
``cleanup()``             ``_stop()``
``reset_config(config)``  ``reset_config(config)``
========================  ========================
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

from rayfield.tune import result as R
from rayfield.tune.auto_fields import date_now, host
from rayfield.tune.checkpoint import (
    DICT_PICKLE,
    LEGACY_METADATA_FILE,
    METADATA_FILE,
    TUNE_FILES,
    has_dict,
    pack_directory,
    read_dict,
    unpack_directory,
    write_dict,
)
from rayfield.tune.error import TuneError
from rayfield.tune.ids import random_hex
from rayfield.tune.pickles import UntrustedPickleError, load_pickle
from rayfield.util import get_node_ip_address, private_files

__all__ = ["Trainable"]


def _overrides(obj: Any, name: str) -> bool:
    return getattr(type(obj), name) is not getattr(Trainable, name)


class Trainable:
    """Base class of class-based trainables (``tune.Trainable``).

    Args:
        config: the trial's hyperparameters; the hooks get a deep copy.
        logger_creator: accepted for compatibility; logging is done by the driver.
        trial_info: ``{"trial_id", "trial_name", "logdir"}``, set by Tune.

    Raises:
        NotImplementedError: (from ``train``) neither ``step`` nor ``_train`` is defined.
    """

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        logger_creator: Any = None,
        trial_info: dict[str, Any] | None = None,
    ) -> None:
        self.config: dict[str, Any] = dict(config or {})
        info = trial_info or {}
        self._trial_id: str = info.get("trial_id", "default")
        self._trial_name: str = info.get("trial_name", "default")
        logdir = info.get("logdir")
        if not logdir:
            import tempfile

            logdir = tempfile.mkdtemp(prefix="tune-trainable-")
        self._logdir: str = logdir
        self._enter_logdir()
        self._experiment_id = random_hex(32)
        self._reset_counters()
        self._setup_hook(copy.deepcopy(self.config))

    # -- bookkeeping ---------------------------------------------------------------
    def _reset_counters(self) -> None:
        self._iteration = 0
        self._time_total = 0.0
        self._timesteps_total: int | None = None
        self._episodes_total: int | None = None
        self._restored_counters()

    def _restored_counters(self) -> None:
        self._time_since_restore = 0.0
        self._timesteps_since_restore = 0
        self._iterations_since_restore = 0

    def _enter_logdir(self) -> None:
        try:
            private_files.ensure_private_dir(self._logdir)  # mode 0700
            os.chdir(self._logdir)
        except OSError:  # a driver-side path that this node cannot write (or not private)
            pass

    def _setup_hook(self, config: dict[str, Any]) -> None:
        if _overrides(self, "setup"):
            self.setup(config)
        else:
            self._setup(config)

    @property
    def logdir(self) -> str:
        """The trial's directory (also the actor's working directory)."""
        return self._logdir

    @property
    def trial_id(self) -> str:
        return self._trial_id

    @property
    def trial_name(self) -> str:
        return self._trial_name

    @property
    def iteration(self) -> int:
        """How many times ``train()`` has run (restored with checkpoints)."""
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    def get_config(self) -> dict[str, Any]:
        return self.config

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """Resources of a trial for ``config`` (None: what ``resources_per_trial`` says)."""
        return None

    @classmethod
    def resource_help(cls, config: dict[str, Any]) -> str:
        return ""

    # -- the driver's calls -----------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run one iteration and return its result with the auto-filled fields.

        Raises:
            TuneError: the step returned something other than a dict.
        """
        start = time.time()
        out = self.step() if _overrides(self, "step") else self._train()
        if not isinstance(out, dict):
            raise TuneError(
                f"{type(self).__name__}.step() must return a dict of metrics, got "
                f"{type(out).__name__}"
            )
        return self._fill(dict(out), time.time() - start)

    def _fill(self, result: dict[str, Any], elapsed_s: float) -> dict[str, Any]:
        self._iteration += 1
        self._iterations_since_restore += 1
        took = result.get(R.TIME_THIS_ITER_S)
        took = float(took) if took is not None else elapsed_s
        self._time_total += took
        self._time_since_restore += took
        if result.get(R.TIMESTEPS_THIS_ITER) is not None:
            steps = int(result[R.TIMESTEPS_THIS_ITER])
            self._timesteps_total = (self._timesteps_total or 0) + steps
            self._timesteps_since_restore += steps
        if result.get(R.EPISODES_THIS_ITER) is not None:
            self._episodes_total = (self._episodes_total or 0) + int(result[R.EPISODES_THIS_ITER])
        if result.get(R.MEAN_LOSS):
            result.setdefault(R.NEG_MEAN_LOSS, -result[R.MEAN_LOSS])
        date, timestamp = date_now()
        pid, hostname, node_ip = host()
        result.setdefault(R.DONE, False)
        result.setdefault(R.TRAINING_ITERATION, self._iteration)
        result.setdefault(R.TIMESTEPS_TOTAL, self._timesteps_total)
        result.setdefault(R.EPISODES_TOTAL, self._episodes_total)
        result.update(
            {
                R.TIME_THIS_ITER_S: took,
                R.TIME_TOTAL_S: self._time_total,
                R.EXPERIMENT_ID: self._experiment_id,
                R.DATE: date,
                R.TIMESTAMP: timestamp,
                R.PID: pid,
                R.HOSTNAME: hostname,
                R.NODE_IP: node_ip,
                R.CONFIG: self.config,
                R.TIME_SINCE_RESTORE: self._time_since_restore,
                R.TIMESTEPS_SINCE_RESTORE: self._timesteps_since_restore,
                R.ITERATIONS_SINCE_RESTORE: self._iterations_since_restore,
            }
        )
        return result

    def train_buffered(
        self, max_results: int, max_time_s: float, stop: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Up to ``max_results`` iterations in one call.

        Returns early after ``max_time_s`` seconds, on a done result, or when a result
        reaches one of the ``stop`` thresholds (``{metric: value}``).
        """
        deadline = time.time() + max_time_s
        results = [self.train()]
        while len(results) < max_results and not results[-1].get(R.DONE):
            last = results[-1]
            if time.time() >= deadline or any(
                k in last and last[k] >= v for k, v in (stop or {}).items()
            ):
                break
            results.append(self.train())
        return results

    def save_to_object(self) -> dict[str, Any]:
        """Save the state; returns a blob ``{"files": ..., "meta": ...}``."""
        import shutil
        import tempfile

        tmp = tempfile.mkdtemp(prefix="tune-save-")
        try:
            saved = self._save_hook(tmp)
            if isinstance(saved, dict):
                write_dict(tmp, saved)  # JSON when it can be, else a pickle
                rel: str | None = None
            elif isinstance(saved, str):
                full = os.path.abspath(saved)
                if full != os.path.abspath(tmp) and not full.startswith(
                    os.path.abspath(tmp) + os.sep
                ):
                    raise ValueError(
                        f"the checkpoint path {saved} returned by save must be inside the "
                        f"checkpoint_dir {tmp} Tune gave"
                    )
                rel = os.path.relpath(full, tmp)
            elif saved is None:
                rel = "."
            else:
                raise ValueError(
                    f"save must return a dict, a path inside checkpoint_dir or None, got "
                    f"{type(saved).__name__}"
                )
            return {"files": pack_directory(tmp), "meta": self._metadata(rel)}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _metadata(self, rel: str | None) -> dict[str, Any]:
        return {
            "experiment_id": self._experiment_id,
            "iteration": self._iteration,
            "timesteps_total": self._timesteps_total,
            "time_total": self._time_total,
            "episodes_total": self._episodes_total,
            "saved_as_dict": rel is None,
            "relpath": rel,
        }

    def restore_from_object(self, blob: dict[str, Any]) -> None:
        """Restore the state saved by :meth:`save_to_object` (on any actor).

        The blob is trusted: it comes from :meth:`save_to_object` or from
        :func:`read_checkpoint_dir`, which checked it. A dict saved as a pickle is loaded.

        Raises:
            ValueError: the metadata names a path outside the checkpoint.
        """
        import shutil
        import tempfile

        tmp = tempfile.mkdtemp(prefix="tune-restore-")
        try:
            unpack_directory(blob["files"], tmp)
            meta = blob["meta"]
            self._experiment_id = meta["experiment_id"]
            self._iteration = meta["iteration"]
            self._timesteps_total = meta["timesteps_total"]
            self._time_total = meta["time_total"]
            self._episodes_total = meta["episodes_total"]
            self._restored_counters()
            if meta["saved_as_dict"]:
                arg: Any = read_dict(tmp, trusted=True, opt_in="")
            else:
                arg = _inside(tmp, meta["relpath"])
            self._restore_hook(arg)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Save to ``<checkpoint_dir or logdir>/checkpoint_<iteration>/`` (mode 0700, with
        its metadata in ``.tune_metadata.json``); returns that dir.

        Raises:
            UnsafeFileError: the directory is not this user's alone.
        """
        target = os.path.join(checkpoint_dir or self._logdir, f"checkpoint_{self._iteration}")
        return write_checkpoint_dir(self.save_to_object(), target)

    def restore(self, checkpoint_path: str, *, trusted: bool = False) -> None:
        """Restore from a directory written by :meth:`save` (or by the driver).

        Args:
            checkpoint_path: the checkpoint directory (or a file in it).
            trusted: the directory is yours: a dict checkpoint saved as a pickle
                (``checkpoint_dict.pkl``) or the pickled ``.tune_metadata`` of an older
                checkpoint may be loaded. Without it they are refused.

        Raises:
            FileNotFoundError: no Tune metadata in ``checkpoint_path``.
            UntrustedPickleError: it holds a pickle Tune would load, without ``trusted``.
            UnsafeFileError: its files are not this user's alone.
        """
        path = (
            checkpoint_path if os.path.isdir(checkpoint_path) else os.path.dirname(checkpoint_path)
        )
        opt_in = "Trainable.restore(path, trusted=True)"
        self.restore_from_object(read_checkpoint_dir(path, trusted=trusted, opt_in=opt_in))

    def delete_checkpoint(self, checkpoint_path: str) -> None:
        path = (
            checkpoint_path if os.path.isdir(checkpoint_path) else os.path.dirname(checkpoint_path)
        )
        import shutil

        shutil.rmtree(path, ignore_errors=True)

    def export_model(self, export_formats: Any, export_dir: str | None = None) -> dict[str, str]:
        """Export the model in ``export_formats`` (a str or list) through ``_export_model``.

        Returns:
            ``{format: path}`` of what was written under ``export_dir`` (default logdir).
        """
        formats = [export_formats] if isinstance(export_formats, str) else list(export_formats)
        target = export_dir or self._logdir
        private_files.ensure_private_dir(target)
        exported = dict(self._export_model(formats, target))
        if "checkpoint" in formats and "checkpoint" not in exported:
            exported["checkpoint"] = self.save(target)
        return exported

    def reset(self, new_config: dict[str, Any], trial_info: dict[str, Any]) -> bool:
        """Take another trial on this actor (``reuse_actors``); False when unsupported."""
        if not self.reset_config(copy.deepcopy(new_config)):
            return False
        self.config = dict(new_config)
        self._trial_id = trial_info.get("trial_id", self._trial_id)
        self._trial_name = trial_info.get("trial_name", self._trial_name)
        self._logdir = trial_info.get("logdir") or self._logdir
        self._enter_logdir()
        self._experiment_id = random_hex(32)
        self._reset_counters()
        return True

    def next_trial(
        self,
        config: dict[str, Any],
        trial_info: dict[str, Any],
        stop_first: bool,
        blob: dict[str, Any] | None,
        max_results: int,
        max_time_s: float,
        stop: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]] | None:
        """Hand this reused actor the next trial and train it, in one call.

        Does what ``stop()`` (when ``stop_first``: the previous trial's cleanup was not
        sent yet), ``reset(config, trial_info)``, ``restore_from_object(blob)`` (when a
        blob is given) and ``train_buffered(max_results, max_time_s, stop)`` (or one
        ``train()`` when ``max_results`` is 1) do one after the other, so that the driver
        sends one message per trial switch instead of three or four.

        Returns:
            The results as ``train_buffered`` returns them; None when ``reset_config``
            refused the new config (nothing was restored or trained: the driver starts a
            fresh actor).
        """
        if stop_first:
            self.stop()
        if not self.reset(config, trial_info):
            return None
        if blob is not None:
            self.restore_from_object(blob)
        if max_results > 1:
            return self.train_buffered(max_results, max_time_s, stop)
        return [self.train()]

    def stop(self) -> None:
        """End the trial: runs ``cleanup()`` (classic ``_stop()``)."""
        if _overrides(self, "cleanup"):
            self.cleanup()
        else:
            self._stop()

    def get_info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "node_ip": get_node_ip_address()}

    def trial_dir_report(self, driver_node: str, with_files: bool) -> dict[str, Any] | None:
        """This trial's directory for the driver, when this actor runs on another node:
        the files new or changed since this trial's previous report (``sync_to_driver``;
        see :mod:`rayfield.tune.driver_sync`)."""
        from rayfield.tune.driver_sync import trial_dir_report

        logdir, sent = getattr(self, "_dir_sent", ("", {}))
        if logdir != self._logdir:  # another trial on this actor: every file is new
            sent = {}
        self._dir_sent: tuple[str, dict[str, tuple[int, int]]] = (self._logdir, sent)
        return trial_dir_report(self._logdir, driver_node, with_files, sent)

    # -- hooks -------------------------------------------------------------------------
    def _save_hook(self, checkpoint_dir: str) -> Any:
        if _overrides(self, "save_checkpoint"):
            return self.save_checkpoint(checkpoint_dir)
        return self._save(checkpoint_dir)

    def _restore_hook(self, checkpoint: Any) -> None:
        if _overrides(self, "load_checkpoint"):
            self.load_checkpoint(checkpoint)
        else:
            self._restore(checkpoint)

    def setup(self, config: dict[str, Any]) -> None:
        """Build the model from ``config`` (a copy of ``self.config``)."""

    def _setup(self, config: dict[str, Any]) -> None:
        """Classic spelling of :meth:`setup`."""

    def step(self) -> dict[str, Any]:
        """One iteration of training; returns its metrics (``done=True`` ends the trial)."""
        raise NotImplementedError

    def _train(self) -> dict[str, Any]:
        """Classic spelling of :meth:`step`."""
        raise NotImplementedError(f"{type(self).__name__} must define step() or _train()")

    def save_checkpoint(self, checkpoint_dir: str) -> Any:
        """Write the state into ``checkpoint_dir``; return None, a path inside it, or a dict."""
        raise NotImplementedError(f"{type(self).__name__} cannot save: define save_checkpoint")

    def _save(self, checkpoint_dir: str) -> Any:
        """Classic spelling of :meth:`save_checkpoint` (returns a path or a dict)."""
        raise NotImplementedError(f"{type(self).__name__} cannot save: define save_checkpoint")

    def load_checkpoint(self, checkpoint: Any) -> None:
        """Restore what :meth:`save_checkpoint` wrote (its dir, path or dict)."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore: define load_checkpoint")

    def _restore(self, checkpoint: Any) -> None:
        """Classic spelling of :meth:`load_checkpoint`."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore: define load_checkpoint")

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Apply ``new_config`` in place for a reused actor; return True if done."""
        return False

    def cleanup(self) -> None:
        """Release what the trainable holds."""

    def _stop(self) -> None:
        """Classic spelling of :meth:`cleanup`."""

    def _export_model(self, export_formats: list[str], export_dir: str) -> dict[str, str]:
        """Write the model in ``export_formats`` into ``export_dir``; ``{format: path}``.

        The default exports nothing itself; ``"checkpoint"`` is then a Tune checkpoint.
        """
        return {}


_META_KEYS = {
    "experiment_id": (str,),
    "iteration": (int,),
    "timesteps_total": (int, float, type(None)),
    "time_total": (int, float),
    "episodes_total": (int, float, type(None)),
    "saved_as_dict": (bool,),
    "relpath": (str, type(None)),
}


def _inside(root: str, rel: Any) -> str:
    """``root/rel``, refused when ``rel`` is not a relative path staying in ``root``."""
    if not isinstance(rel, str) or os.path.isabs(rel):
        raise ValueError(f"checkpoint path {rel!r} is not a path relative to the checkpoint")
    full = os.path.normpath(os.path.join(root, rel))
    if full != os.path.normpath(root) and not full.startswith(os.path.normpath(root) + os.sep):
        raise ValueError(f"checkpoint path {rel!r} leads outside the checkpoint")
    return full


def _check_meta(meta: Any, path: str) -> dict[str, Any]:
    if not isinstance(meta, dict) or any(
        not isinstance(meta.get(k), types) for k, types in _META_KEYS.items()
    ):
        expected = ", ".join(_META_KEYS)
        raise TuneError(f"{path} is not Tune checkpoint metadata (a JSON object of {expected})")
    if meta["relpath"] is not None:
        _inside("/checkpoint", meta["relpath"])
    return meta


def checkpoint_pickles(path: str) -> list[str]:
    """The pickles :func:`read_checkpoint_dir` and a restore would load from the
    checkpoint directory ``path``: the pickled metadata of an older checkpoint (when there
    is no ``.tune_metadata.json``) and a pickled dict."""
    found = []
    if not os.path.lexists(os.path.join(path, METADATA_FILE)):
        found.append(os.path.join(path, LEGACY_METADATA_FILE))
    found.append(os.path.join(path, DICT_PICKLE))
    return [p for p in found if os.path.lexists(p)]


def read_checkpoint_dir(
    path: str, *, trusted: bool = False, opt_in: str = "trusted=True"
) -> dict[str, Any]:
    """The blob of a checkpoint directory written by ``Trainable.save`` or the driver.

    The metadata is read from ``.tune_metadata.json``. Pickles Tune would load later are
    refused unless ``trusted``: the pickled ``.tune_metadata`` of an older checkpoint and
    a dict saved as ``checkpoint_dict.pkl``.

    Args:
        path: the checkpoint directory.
        trusted: the caller trusts the directory's pickles.
        opt_in: how the caller's user says so, for the error.

    Raises:
        FileNotFoundError: no Tune metadata in ``path``.
        UntrustedPickleError: a pickle Tune would load, without ``trusted``.
        UnsafeFileError: the metadata file is not this user's alone.
        TuneError: the metadata is not what Tune writes.
    """
    meta_file = os.path.join(path, METADATA_FILE)
    legacy = os.path.join(path, LEGACY_METADATA_FILE)
    if os.path.lexists(meta_file):
        meta = _check_meta(private_files.read_json(meta_file, max_bytes=1 << 20), meta_file)
    elif os.path.lexists(legacy):
        meta = _check_meta(load_pickle(legacy, trusted=trusted, opt_in=opt_in), legacy)
    else:
        raise FileNotFoundError(f"{path} is not a Tune checkpoint (no {METADATA_FILE})")
    if meta["saved_as_dict"] and not has_dict(path):
        raise TuneError(f"{path}: the metadata says a dict was saved, but none is there")
    if not trusted and checkpoint_pickles(path):
        raise UntrustedPickleError(checkpoint_pickles(path)[0], opt_in)
    files = pack_directory(path)
    for name in TUNE_FILES:
        files.pop(name, None)
    return {"files": files, "meta": meta}


def write_checkpoint_dir(blob: dict[str, Any], path: str) -> str:
    """Write a blob into ``path`` (mode 0700) with its metadata as JSON
    (``.tune_metadata.json``, 0600); returns ``path``.

    Raises:
        UnsafeFileError: ``path`` or a directory above it is not this user's alone.
    """
    unpack_directory(blob["files"], path)
    private_files.write_json(os.path.join(path, METADATA_FILE), blob["meta"])
    return path
