"""``sync_to_driver``: how the files a trial writes on another node reach the driver.

A trial's actor works in the trial's directory (its working directory). The driver
writes the results, logs and checkpoints there itself (results and checkpoints travel
through the cluster), but files the trainable writes on its own (plots, a model
export, a log) land on the actor's node. When a trial ends on a node other than the
driver's, ``sync_to_driver`` says what happens to them:

* ``None`` / ``True`` (default): copied through the cluster. The actor packs its trial
  directory (``checkpoint_*`` directories left out: checkpoints already reach the
  driver, which may have deleted old ones on purpose) and the driver writes each file
  that its copy of the trial directory lacks (it never replaces one: its own results
  and logs live there too).
* ``False``: nothing is copied.
* a command template with ``{source}`` and ``{target}`` (``"rsync -a {source}/
  {target}"``; ``source`` is ``<node ip>:<trial dir on that node>``), or a function
  ``f(source, target)``: run on the driver (see :mod:`rayfield.tune.syncer`).

Nothing happens for trials on the driver's node, nor while the cluster has one node (no
actor call at all); the copy is asked for when the trial's actor is released and written
when it arrives, without blocking the driver's loop.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import rayfield
from rayfield.tune.checkpoint import pack_directory
from rayfield.tune.error import TuneError

__all__ = ["DriverSync", "merge_files", "trial_dir_report"]

log = logging.getLogger(__name__)
SKIPPED_PREFIX = "checkpoint_"
_NODES_REFRESH_S = 5.0


def trial_dir_report(logdir: str, driver_node: str, with_files: bool) -> dict[str, Any] | None:
    """In the trial's actor: None on the driver's node, else ``{"node_id", "node_ip",
    "logdir"}`` and, with ``with_files``, ``"files"`` (``{relative path: bytes}``
    without ``checkpoint_*`` directories)."""
    node = rayfield.get_runtime_context().get_node_id()
    if node == driver_node:
        return None
    from rayfield.tune.trainable import _node_ip

    report: dict[str, Any] = {"node_id": node, "node_ip": _node_ip(), "logdir": logdir}
    if with_files:
        files = pack_directory(logdir) if Path(logdir).is_dir() else {}
        report["files"] = {
            rel: data for rel, data in files.items() if not rel.startswith(SKIPPED_PREFIX)
        }
    return report


def merge_files(files: dict[str, bytes], target: str) -> list[str]:
    """Write each of ``files`` that ``target`` lacks; returns the relative paths written.

    A file already in ``target`` is never replaced: the driver writes the trial's results,
    logs and checkpoints into the same directory, and on a file system the nodes share,
    the packed copy of such a file can be older than the driver's.

    Raises:
        ValueError: a path that would land outside ``target``.
    """
    root = Path(target)
    written = []
    for rel, data in sorted(files.items()):
        path = root / rel
        if root.resolve() not in path.resolve().parents:
            raise ValueError(f"synced file {rel!r} would land outside {root}")
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(rel)
    return written


class DriverSync:
    """The driver's side of ``sync_to_driver`` (see the module docstring).

    Args:
        choice: None/True, False, a command template or a function.

    Raises:
        TuneError: a value of another kind.
    """

    def __init__(self, choice: Any = None) -> None:
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
        self.driver_node = ""
        self._multi_node = False
        self._checked = -float("inf")

    def wanted(self) -> bool:
        """Whether a released trial's actor should be asked (the cluster has more than one
        alive node; checked at most every 5 s)."""
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

    def apply(self, logdir: str, report: dict[str, Any] | None) -> list[str]:
        """Bring the trial directory of ``report`` into ``logdir``; returns what the
        built-in copy wrote (empty for a template or function)."""
        if report is None:
            return []
        if self.syncer is not None:
            self.syncer.sync_down(f"{report['node_ip']}:{report['logdir']}", logdir)
            return []
        return merge_files(report["files"], logdir)
