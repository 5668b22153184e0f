"""``sync_to_driver``: how the files a trial writes on another node reach the driver.

A trial's actor works in the trial's directory (its working directory). The driver
writes the results, logs and checkpoints there itself (results and checkpoints travel
through the cluster), but files the trainable writes on its own (plots, a model
export, a log) land on the actor's node. For a trial on a node other than the
driver's, ``sync_to_driver`` says what happens to them:

* ``None`` / ``True`` (default): copied through the cluster. The actor packs the files
  of its trial directory that are new or changed (size or modification time) since its
  last copy, ``checkpoint_*`` directories left out (checkpoints already reach the
  driver, which may have deleted old ones on purpose). The driver writes each file its
  copy of the directory lacks, and replaces the files an earlier copy wrote; it never
  replaces any other file (its own results and logs live there too).
* ``False``: nothing is copied.
* a command template with ``{source}`` and ``{target}`` (``"rsync -a {source}/
  {target}"``; ``source`` is ``<node ip>:<trial dir on that node>``), or a function
  ``f(source, target)``: run on the driver (see :mod:`rayfield.tune.syncer`).

When: while the trial runs, after a checkpoint is saved (``on_checkpoint``) and at
least ``period_s`` after the trial's previous copy (its start for the first), and once
more when the trial's actor is released. A copy during the run is asked for between two
training calls of the trial (the actor runs calls in order, so the directory is read
while the trainable waits for its next call), at most one at a time per trial; it is
written when it arrives, without blocking the driver's loop. Nothing is asked for
trials on the driver's node (one call, answered None), nor while the cluster has one
node (no actor call at all).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rayfield
from rayfield.tune.error import TuneError
from rayfield.util import get_node_ip_address, private_files

__all__ = ["DriverSync", "merge_files", "pack_changed", "trial_dir_report"]

log = logging.getLogger(__name__)
SKIPPED_PREFIX = "checkpoint_"
_NODES_REFRESH_S = 5.0
DEFAULT_PERIOD_S = 300.0


def pack_changed(logdir: str, sent: dict[str, tuple[int, int]]) -> dict[str, bytes]:
    """The files under ``logdir`` that are not in ``sent`` or changed since, as
    ``{relative posix path: bytes}`` (``checkpoint_*`` directories at the top left out).

    Args:
        logdir: the trial directory.
        sent: ``{relative path: (size in bytes, mtime in ns)}`` of the files packed
            before; updated in place with the files packed now.
    """
    root = Path(logdir)
    files: dict[str, bytes] = {}
    if not root.is_dir():
        return files
    for here, dirs, names in os.walk(root):
        if Path(here) == root:
            dirs[:] = [d for d in dirs if not d.startswith(SKIPPED_PREFIX)]
        for name in names:
            path = Path(here) / name
            rel = path.relative_to(root).as_posix()
            if rel.startswith(SKIPPED_PREFIX):
                continue
            try:
                st = path.stat()
                stamp = (st.st_size, st.st_mtime_ns)
                if sent.get(rel) == stamp:
                    continue
                files[rel] = path.read_bytes()
            except OSError:  # removed or unreadable meanwhile: the next copy tries again
                continue
            sent[rel] = stamp
    return dict(sorted(files.items()))


def trial_dir_report(
    logdir: str,
    driver_node: str,
    with_files: bool,
    sent: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any] | None:
    """In the trial's actor: None on the driver's node, else ``{"node_id", "node_ip",
    "logdir"}`` and, with ``with_files``, ``"files"``: what :func:`pack_changed` packs
    (every file when ``sent`` is None)."""
    node = rayfield.get_runtime_context().get_node_id()
    if node == driver_node:
        return None
    report: dict[str, Any] = {"node_id": node, "node_ip": get_node_ip_address(), "logdir": logdir}
    if with_files:
        report["files"] = pack_changed(logdir, {} if sent is None else sent)
    return report


def merge_files(
    files: dict[str, bytes], target: str, replaceable: set[str] | None = None
) -> list[str]:
    """Write each of ``files`` that ``target`` lacks or that is in ``replaceable``;
    returns the relative paths written.

    Any other file already in ``target`` is never replaced: the driver writes the trial's
    results, logs and checkpoints into the same directory, and on a file system the nodes
    share, the packed copy of such a file can be older than the driver's.

    Directories are made mode 0700 and files 0600, never through a symlink.

    Raises:
        ValueError: a path that would land outside ``target``.
        UnsafeFileError: ``target`` or a file in it is not this user's alone.
    """
    root = Path(target)
    written = []
    for rel, data in sorted(files.items()):
        path = root / rel
        if root.resolve() not in path.resolve().parents:
            raise ValueError(f"synced file {rel!r} would land outside {root}")
        if os.path.lexists(path) and rel not in (replaceable or ()):
            continue
        private_files.ensure_private_dir(path.parent)
        with private_files.open_private(path, "wb") as f:
            f.write(data)
        written.append(rel)
    return written


class DriverSync:
    """The driver's side of ``sync_to_driver`` (see the module docstring).

    The per-trial pacing (:meth:`due`, :meth:`asked`, :meth:`on_checkpoint`) is a pure
    object on ``clock``; :meth:`wanted` asks the cluster how many nodes it has.

    Args:
        choice: None/True, False, a command template or a function.
        period_s: the least seconds between two copies of a running trial (from its
            start for the first); ``math.inf``: none while it runs unless on checkpoint.
        on_checkpoint: also copy after each checkpoint of the trial (the next copy is
            due at once).
        clock: monotonic seconds (for tests).

    Raises:
        TuneError: ``choice`` of another kind, or ``period_s`` < 0.
    """

    def __init__(
        self,
        choice: Any = None,
        period_s: float = DEFAULT_PERIOD_S,
        on_checkpoint: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from rayfield.tune.syncer import get_syncer

        self.enabled = choice is not False
        self.syncer = None
        if choice not in (None, True, False):
            if not (isinstance(choice, str) or callable(choice)):
                raise TuneError(
                    "sync_to_driver must be True, False, a command template with {source} "
                    f"and {{target}}, or a function f(source, target); got {choice!r}"
                )
            self.syncer = get_syncer("", choice)
        if not period_s >= 0:
            raise TuneError(f"the sync_to_driver period must be >= 0 seconds, got {period_s}")
        self.period_s = period_s
        self.on_checkpoint_sync = on_checkpoint
        self._clock = clock
        self.driver_node = ""
        self._multi_node = False
        self._checked = -float("inf")
        # Per running trial: when its last copy was asked for (or it started), whether a
        # checkpoint came since, and whether its actor is on the driver's node.
        self._last: dict[str, float] = {}
        self._checkpointed: set[str] = set()
        self._local: set[str] = set()
        # Per driver trial directory: the files earlier copies wrote (replaceable).
        self._written: dict[str, set[str]] = {}

    def wanted(self) -> bool:
        """Whether a trial's actor should be asked (the cluster has more than one alive
        node; checked at most every 5 s)."""
        if not self.enabled:
            return False
        now = time.monotonic()
        if now - self._checked > _NODES_REFRESH_S:
            self._checked = now
            self._multi_node = sum(1 for n in rayfield.nodes() if n.get("Alive")) > 1
            self.driver_node = self.driver_node or str(
                rayfield.get_runtime_context().get_node_id() or ""
            )
        return self._multi_node

    @property
    def with_files(self) -> bool:
        return self.syncer is None

    # ---- pacing of the copies while a trial runs -------------------------------------
    def on_trial_start(self, trial_id: str) -> None:
        """The trial's actor started training it (the period counts from now)."""
        self._last[trial_id] = self._clock()
        self._checkpointed.discard(trial_id)
        self._local.discard(trial_id)

    def on_checkpoint(self, trial_id: str) -> None:
        """A checkpoint of the trial was saved."""
        if self.on_checkpoint_sync and self.enabled:
            self._checkpointed.add(trial_id)

    def due(self, trial_id: str) -> bool:
        """Whether a copy of the running trial should be asked for now."""
        if not self.enabled or trial_id in self._local or trial_id not in self._last:
            return False
        if trial_id in self._checkpointed:
            return True
        return self._clock() - self._last[trial_id] >= self.period_s

    def asked(self, trial_id: str) -> None:
        """A copy of the trial was asked for (the period counts from now)."""
        self._last[trial_id] = self._clock()
        self._checkpointed.discard(trial_id)

    def on_trial_end(self, trial_id: str) -> None:
        """The trial's actor was released (its last copy is asked for separately)."""
        self._last.pop(trial_id, None)
        self._checkpointed.discard(trial_id)
        self._local.discard(trial_id)

    # ---- writing what arrived ---------------------------------------------------------
    def apply(
        self, logdir: str, report: dict[str, Any] | None, trial_id: str = "", final: bool = True
    ) -> list[str]:
        """Bring the trial directory of ``report`` into ``logdir``; returns what the
        built-in copy wrote (empty for a template or function).

        Args:
            trial_id: the trial (a None report marks it as on the driver's node, so no
                more copies are asked for while it runs).
            final: the trial's last copy (asked for when its actor was released after it
                ended); what earlier copies of ``logdir`` wrote is forgotten after it.
        """
        try:
            if report is None:
                if trial_id and trial_id in self._last:
                    self._local.add(trial_id)
                return []
            if self.syncer is not None:
                self.syncer.sync_down(f"{report['node_ip']}:{report['logdir']}", logdir)
                return []
            written = merge_files(report["files"], logdir, self._written.get(logdir))
            if written and not final:
                self._written.setdefault(logdir, set()).update(written)
            return written
        finally:
            if final:
                self._written.pop(logdir, None)
