"""The process context: what ``init()`` (or a worker's start) set up in this process.

One :class:`ProcessContext` exists between ``rayfield.init()`` and ``rayfield.shutdown()``
(in a worker process, for its whole life): the runtime that talks to the node, the node
``init()`` started (if it started one), the session information ``init()`` returns, how
the process is connected (:class:`Mode`) and its job id. Modules of every layer above
read it through :func:`current` / :func:`require`; ``api.init`` creates it
(:func:`install`) and ``api.shutdown`` clears it (:func:`clear`).

This module imports only ``rayfield.exceptions``: the runtime and the node are held as
objects whose types live in higher layers (``runtime.get_runtime()`` gives the typed
runtime).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rayfield.exceptions import RayfieldError

__all__ = [
    "Mode",
    "NodeHandle",
    "ProcessContext",
    "clear",
    "current",
    "gcs_address",
    "install",
    "require",
    "runtime",
    "sessions_root",
]

NOT_INITIALIZED = "rayfield is not initialized: call rayfield.init() first"


class Mode(str, enum.Enum):
    """How this process reaches its node."""

    EMBEDDED = "embedded"
    """``init()`` started a node for this driver (stopped by ``shutdown()``)."""
    CONNECTED = "connected"
    """``init(address=...)`` connected the driver to a node started elsewhere."""
    LOCAL = "local_mode"
    """``init(local_mode=True)``: no node; tasks run serially in this process."""
    WORKER = "worker"
    """A worker process of a node."""


class NodeHandle(Protocol):
    """The node ``init()`` started in this driver's session (a ``node_manager.node.Node``)."""

    socket_path: str

    def shutdown(self) -> None:
        """Stop the node and its workers."""


@dataclass
class ProcessContext:
    """Everything ``init()`` set up in this process.

    Attributes:
        mode: how the process reaches its node.
        runtime: the process's runtime (``Runtime``, or ``LocalRuntime`` in local mode).
        info: the address information ``init()`` returned (``node_ip_address``,
            ``session_dir``, ``object_store_address``...; ``gcs_address`` and
            ``temp_dir`` when the driver joined a cluster). Empty in a worker.
        node: the node ``init()`` started, or None (connected, local mode, worker).
        job_id: the 12-byte job id of a driver (the prefix of its ids); empty in local
            mode.
    """

    mode: Mode
    runtime: Any
    info: dict[str, Any] = field(default_factory=dict)
    node: NodeHandle | None = None
    job_id: bytes = b""


_current: ProcessContext | None = None


def current() -> ProcessContext | None:
    """This process's context, or None before ``init()`` and after ``shutdown()``."""
    return _current


def require() -> ProcessContext:
    """This process's context.

    Raises:
        RayfieldError: rayfield is not initialized (no ``init()`` yet, or after
            ``shutdown()``).
    """
    if _current is None:
        raise RayfieldError(NOT_INITIALIZED)
    return _current


def runtime() -> Any:
    """This process's runtime: ``require().runtime`` in one call (every submit and get
    asks for it).

    Raises:
        RayfieldError: rayfield is not initialized.
    """
    if _current is None:
        raise RayfieldError(NOT_INITIALIZED)
    return _current.runtime


def install(context: ProcessContext) -> None:
    """Make ``context`` this process's context.

    Raises:
        RuntimeError: a context is installed already (call :func:`clear` first).
    """
    global _current
    if _current is not None:
        raise RuntimeError("this process has a rayfield context already: shut it down first")
    _current = context


def clear() -> ProcessContext | None:
    """Remove this process's context; returns it (None when there was none)."""
    global _current
    previous, _current = _current, None
    return previous


def gcs_address() -> str | None:
    """The GCS address (``host:port``) of this process's cluster, or None outside a
    cluster: a worker's from ``RAYFIELD_GCS_ADDRESS`` (set by its node), a driver's from
    ``init(address=...)``."""
    info = _current.info if _current is not None else {}
    return os.environ.get("RAYFIELD_GCS_ADDRESS") or info.get("gcs_address") or None


def sessions_root() -> Path | None:
    """The folder where the driver looked for its cluster's sessions (and token), if
    ``init()`` was given or found one."""
    temp_dir = _current.info.get("temp_dir") if _current is not None else None
    return Path(temp_dir) if temp_dir else None
