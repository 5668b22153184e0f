"""``LoggerCallback``: the driver's callback that writes each trial's result files through
its :mod:`loggers <rayfield.tune.logger>` (on the driver loop's writer thread, in batches)."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from typing import Any

from rayfield.tune.callback import Callback
from rayfield.tune.logger import Logger, UnifiedLogger, _opening
from rayfield.tune.trial import Trial
from rayfield.tune.writer import BackgroundWriter
from rayfield.util import private_files

__all__ = ["LoggerCallback"]


class LoggerCallback(Callback):
    """Writes each trial's files and its ``error_<n>.txt`` files.

    With a ``writer``, a trial's results are handed to its loggers in batches: at the
    trial's end, at each experiment checkpoint (:meth:`on_checkpoint`, before the state
    is saved), before a config change or an error file of the trial, and with the first
    result after ``flush_interval_s`` seconds, when the files are flushed. What is on
    disk at those moments is what a logger writing each result at once would have
    written (its buffered files were flushed at the same moments).

    Args:
        loggers: the ``Logger`` classes opened per trial (default :data:`DEFAULT_LOGGERS`).
        flush_interval_s: with the first result this long after the last flush, every
            trial's results are written and the files flushed (also at each experiment
            checkpoint and trial end).
        writer: when given, every file operation runs on its thread, in order (the
            driver loop passes one); without it they run in the caller, each result at
            once.
    """

    def __init__(
        self,
        loggers: Sequence[type[Logger]] | None = None,
        flush_interval_s: float = 1.0,
        writer: BackgroundWriter | None = None,
    ) -> None:
        self.loggers = loggers
        self.flush_interval_s = flush_interval_s
        self.writer = writer
        self._open: dict[str, UnifiedLogger] = {}  # touched only by the operations below
        # Results not handed to the writer yet, by trial id (with a writer only).
        self._pending: dict[str, tuple[Trial, list[dict[str, Any]]]] = {}
        self._last_flush = time.monotonic()
        # Directories whose trial directories are made with one mkdir: each passed the
        # ancestor checks of ensure_private_dir once (touched only by the operations).
        self._checked_parents: set[str] = set()

    def _run(self, op: Callable[[], Any]) -> None:
        if self.writer is not None:
            self.writer.submit(op)
        else:
            op()

    def _logger(
        self, trial_id: str, config: dict[str, Any], logdir: str, trial: Trial
    ) -> UnifiedLogger:
        logger = self._open.get(trial_id)
        if logger is None:
            self._make_dir(logdir)
            _opening.logdir = logdir  # made private just now: the logger skips the check
            try:
                logger = UnifiedLogger(config, logdir, trial, self.loggers)
            finally:
                _opening.logdir = None
            self._open[trial_id] = logger
        return logger

    def _make_dir(self, logdir: str) -> None:
        """Make the trial directory mode 0700 (as ``ensure_private_dir``).

        In a directory that passed the checks before (this user's or root's, and no one
        else may add to it), a trial directory takes one ``mkdir`` when it is new (the
        umask only takes bits away), or one ``lstat`` when it is there already (the
        trial's actor on this node usually makes it first): a directory of this user
        that no one else can write. Anything else, and the first trial directory of each
        parent, gets the whole check.

        Raises:
            UnsafeFileError: the directory or one above is not this user's alone.
        """
        parent = os.path.dirname(os.path.abspath(logdir))
        if parent in self._checked_parents:
            try:
                os.mkdir(logdir, 0o700)
            except FileExistsError:
                st = os.lstat(logdir)
                if (
                    stat.S_ISDIR(st.st_mode)
                    and st.st_uid == os.getuid()
                    and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                ):
                    if stat.S_IMODE(st.st_mode) != 0o700:
                        os.chmod(logdir, 0o700)
                    return
            except OSError:
                pass
            else:
                os.chmod(logdir, 0o700)
                return
        private_files.ensure_private_dir(logdir)
        self._checked_parents.add(parent)

    def _hand_over(self, trial_id: str) -> None:
        """Queue the writing of ``trial_id``'s pending results (one operation)."""
        entry = self._pending.pop(trial_id, None)
        if entry is None:
            return
        trial, results = entry
        args = (trial.trial_id, trial.config, trial.logdir, trial)
        self._run(lambda: self._logger(*args).on_results(results))

    def _hand_over_all(self) -> None:
        for trial_id in list(self._pending):
            self._hand_over(trial_id)

    def on_trial_start(self, trial: Trial) -> None:
        if trial.logdir:
            args = (trial.trial_id, trial.config, trial.logdir, trial)
            self._run(lambda: self._logger(*args))

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> None:
        if not trial.logdir:
            return
        if self.writer is None:
            args = (trial.trial_id, trial.config, trial.logdir, trial)
            self._logger(*args).on_result(result)
        else:
            entry = self._pending.get(trial.trial_id)
            if entry is None:
                self._pending[trial.trial_id] = (trial, [result])
            else:
                entry[1].append(result)
        now = time.monotonic()
        if now - self._last_flush > self.flush_interval_s:
            self._last_flush = now
            self._hand_over_all()
            self._run(self._flush_all)

    def _flush_all(self) -> None:
        for logger in self._open.values():
            logger.flush()

    def on_trial_reset(self, trial: Trial) -> None:
        if trial.logdir:
            self._hand_over(trial.trial_id)  # the results of the old config first
            args = (trial.trial_id, trial.config, trial.logdir, trial)
            config = trial.config
            self._run(lambda: self._logger(*args).update_config(config))

    def on_trial_error(self, trial: Trial, error: str) -> None:
        if not trial.logdir:
            return
        self._hand_over(trial.trial_id)
        path = os.path.join(trial.logdir, f"error_{trial.num_failures}.txt")
        logdir = trial.logdir

        def write() -> None:
            private_files.ensure_private_dir(logdir)
            private_files.write_text(path, error)

        self._run(write)
        trial.error_file = path

    def on_trial_complete(self, trial: Trial) -> None:
        trial_id = trial.trial_id
        self._hand_over(trial_id)

        def close() -> None:
            logger = self._open.pop(trial_id, None)
            if logger is not None:
                logger.close()

        self._run(close)

    def on_checkpoint(self) -> None:
        # The saved state must never be ahead of the result files: the state is written
        # after this flush (on the same writer thread, or by the caller afterwards).
        self._hand_over_all()
        self._run(self._flush_all)

    def on_experiment_end(self, trials: list[Trial]) -> None:
        self._hand_over_all()

        def close_all() -> None:
            for logger in self._open.values():
                logger.close()
            self._open.clear()

        self._run(close_all)
