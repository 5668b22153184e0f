"""Worker preload: the setting, and how a worker pool decides between forking and spawning.

A node configured with preload modules (``init(worker_preload_modules=[...])``, ``rayfield
start --worker-preload-modules``, or ``RAYFIELD_WORKER_PRELOAD_MODULES``) starts one fork
server (the "zygote", ``runtime/zygote_main.py``) that imports the worker's own modules and the
listed ones once; each new worker is then forked from it instead of starting a fresh
interpreter. This module holds the pure parts: parsing the setting, the pool's choice for each
worker start (:class:`ZygoteState`), and the child's module search path
(:func:`merge_sys_path`). Nothing here starts a process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Literal

__all__ = [
    "ENV_PRELOAD",
    "READY_TIMEOUT_S",
    "ZygoteState",
    "merge_sys_path",
    "parse_modules",
    "resolve_modules",
]

ENV_PRELOAD = "RAYFIELD_WORKER_PRELOAD_MODULES"
# How long the zygote may take to import its modules before workers are spawned plainly.
READY_TIMEOUT_S = 60.0
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def parse_modules(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The module names of a preload setting, in order, each once.

    Args:
        value: a comma-separated string (the environment variable's and the CLI's form), a
            sequence of names, or None (no preload).

    Returns:
        Dotted module names such as ``("torch", "numpy.linalg")``; ``()`` for None or an
        empty string.

    Raises:
        TypeError: ``value`` is neither a string nor a sequence of strings.
        ValueError: a name is not a dotted Python module name (e.g. ``"torch nn"`` or
            ``"./mod.py"``); the message names it.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",")]
    elif isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise TypeError(
            f"worker_preload_modules must be a list of module names or a comma-separated "
            f"string, got {type(value).__name__}"
        )
    for name in names:
        if name and not _MODULE.fullmatch(name):
            raise ValueError(
                f"worker_preload_modules: {name!r} is not a module name; give importable "
                f"dotted names such as 'torch' or 'my_pkg.policy'"
            )
    return tuple(dict.fromkeys(n for n in names if n))


def resolve_modules(
    explicit: str | Sequence[str] | None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The preload modules of a node: ``explicit`` when given (an empty list turns preload
    off), else ``RAYFIELD_WORKER_PRELOAD_MODULES`` from ``environ`` (default ``os.environ``),
    else none. Raises as :func:`parse_modules`."""
    if explicit is not None:
        return parse_modules(explicit)
    env = os.environ if environ is None else environ
    return parse_modules(env.get(ENV_PRELOAD))


Choice = Literal["spawn", "fork", "wait"]


class ZygoteState:
    """The worker pool's view of its zygote: how to start the next worker.

    ``"spawn"``: a fresh interpreter, as without preload (no zygote configured, or it
    failed). ``"wait"``: the zygote is still importing, keep the request queued.
    ``"fork"``: ask the zygote. Events: :meth:`ready`, :meth:`failed` (the zygote exited, did
    not answer, answered an error, or took longer than ``ready_timeout_s`` to get ready). A
    failure is final and its reason is returned once by :meth:`take_warning`.

    Args:
        modules: the preload modules; empty means no zygote (every choice is ``"spawn"``).
        started_at: the monotonic time the zygote was started.
        ready_timeout_s: seconds after ``started_at`` at which a zygote that is not ready
            counts as failed.
    """

    def __init__(
        self,
        modules: Sequence[str],
        started_at: float = 0.0,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self.phase: Literal["off", "starting", "ready", "failed"] = "starting" if modules else "off"
        self.started_at = started_at
        self.ready_timeout_s = ready_timeout_s
        self.reason: str | None = None
        self._warned = False

    def ready(self) -> None:
        """The zygote imported its modules and takes requests."""
        if self.phase == "starting":
            self.phase = "ready"

    def failed(self, reason: str) -> None:
        """The zygote can no longer be used (``reason`` says why, for the warning)."""
        if self.phase in ("starting", "ready"):
            self.phase, self.reason = "failed", reason

    def choice(self, now: float) -> Choice:
        """How to start a worker at monotonic time ``now``."""
        if self.phase == "starting" and now - self.started_at > self.ready_timeout_s:
            self.failed(f"not ready after {self.ready_timeout_s:.0f} s")
        if self.phase == "starting":
            return "wait"
        return "fork" if self.phase == "ready" else "spawn"

    def wait_left(self, now: float) -> float:
        """Seconds until a starting zygote times out (0 when not starting)."""
        if self.phase != "starting":
            return 0.0
        return max(0.0, self.started_at + self.ready_timeout_s - now)

    def take_warning(self) -> str | None:
        """The failure's reason the first time it is asked after a failure, else None."""
        if self.phase != "failed" or self._warned:
            return None
        self._warned = True
        return self.reason


def merge_sys_path(current: Sequence[str], pythonpath: str) -> list[str]:
    """The module search path of a forked worker.

    A worker spawned fresh gets ``PYTHONPATH`` (the node's ``sys.path`` when it started the
    worker) in front of the interpreter's own entries. A forked worker starts with the
    zygote's ``sys.path``, made from an older ``PYTHONPATH``: entries added since are
    inserted, in order, after the last of the older entries still present (after
    ``current[0]``, the working directory entry, when none is), so the result matches what a
    fresh worker would search first.

    Args:
        current: the zygote's ``sys.path``.
        pythonpath: the worker's ``PYTHONPATH`` (``os.pathsep``-separated).
    """
    out = list(current)
    wanted = [p for p in pythonpath.split(os.pathsep) if p]
    at = 1 if out else 0
    for entry in wanted:
        if entry in out:
            at = max(at, out.index(entry) + 1)
        else:
            out.insert(at, entry)
            at += 1
    return out
