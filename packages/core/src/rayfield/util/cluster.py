"""Find, start and stop the processes of a rayfield cluster on this machine.

What ``rayfield start|stop|dashboard`` (rayfield-cli), the dashboard and the libraries
use to locate a cluster and its token and to run its processes. A cluster has one head
(a GCS process and a node process) and any number of other nodes; each node has a
session directory ``<temp_dir>/session_<time>_<pid>``. The head's session holds the
cluster token (``token``) and ``cluster.json`` (the GCS address), and
``<temp_dir>/session_latest`` points at it. The default ``temp_dir`` is per user
(``<tmp>/rayfield-<uid>``); directories are 0700 and files 0600, and everything read
from them is checked to be this user's alone first (else ``UnsafeSessionError``).

Finding a cluster (Ray: ``ray.init(address="auto")`` and ``RAY_ADDRESS``):

- ``find_gcs_address(temp_dir)``: the GCS ``HOST:PORT`` of the head running here.
- ``resolve_address(address, temp_dir)``: ``None``/``"auto"`` -> that address; a
  ``HOST:PORT`` as given.
- ``find_token(address, temp_dir)``: ``$RAYFIELD_TOKEN``, else the head's token file.

``TlsConfig`` (mutual TLS paths) and ``read_token`` (a token file) load grpc on first
use, so the commands that never call the cluster start without it.

Restarting a killed head: ``killed_head(temp_dir, address)`` finds the session of a head
whose GCS was killed; ``start_gcs(..., restore=that_session)`` starts the cluster again
from its database and token.

A cluster whose head keeps its session elsewhere (rayfield-autoscaler's
``local_process`` nodes each have a temp dir of their own) is made findable by
``point_latest_session(head_session)``: ``<tmp>/rayfield-<uid>/session_latest`` points
at it, so ``init(address="auto")`` and ``rayfield status`` find it;
``unpoint_latest_session`` removes that link when the head goes.

Running processes: ``NodeOptions``, ``new_session_dir``, ``start_gcs``, ``start_node``,
``start_dashboard``, ``stop_all``, ``rayfield_processes``, ``clean_stopped_sessions``.

Example:
    >>> from rayfield.util import cluster
    >>> address = cluster.resolve_address("auto")          # doctest: +SKIP
    >>> token = cluster.find_token(address)                 # doctest: +SKIP
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from rayfield._private.common import session_files
from rayfield._private.common.session_files import ERROR_MARK, UnsafeSessionError
from rayfield._private.driver.certs import make_test_certificates
from rayfield._private.driver.launch import (
    ENV_TOKEN,
    ClusterError,
    NodeOptions,
    default_temp_dir,
    find_gcs_address,
    find_token,
    head_session,
    killed_head,
    new_session_dir,
    rayfield_processes,
    start_dashboard,
    start_gcs,
    start_node,
    stop_all,
)

if TYPE_CHECKING:
    from rayfield._private.gcs.auth import read_token
    from rayfield._private.transport import TlsConfig

__all__ = [
    "ENV_TOKEN",
    "ERROR_MARK",
    "ClusterError",
    "NodeOptions",
    "TlsConfig",
    "UnsafeSessionError",
    "clean_stopped_sessions",
    "default_temp_dir",
    "find_gcs_address",
    "find_token",
    "head_session",
    "killed_head",
    "make_test_certificates",
    "new_session_dir",
    "point_latest_session",
    "rayfield_processes",
    "read_session_json",
    "read_token",
    "resolve_address",
    "start_dashboard",
    "start_gcs",
    "start_node",
    "stop_all",
    "unpoint_latest_session",
    "write_private",
]


def __getattr__(name: str) -> Any:
    if name == "TlsConfig":
        from rayfield._private.transport import TlsConfig

        return TlsConfig
    if name == "read_token":
        from rayfield._private.gcs.auth import read_token

        return read_token
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_HOST_PORT = re.compile(r"[^/\s:]+:\d+|\[[0-9a-fA-F:]+\]:\d+")


def resolve_address(address: str | None = None, temp_dir: Path | None = None) -> str:
    """The GCS address of a cluster, as ``HOST:PORT``.

    Args:
        address: ``HOST:PORT`` of the GCS (returned as is), or None or ``"auto"``: the
            head started on this machine with ``rayfield start --head``.
        temp_dir: root of the session directories where the head is looked for
            (default ``<tmp>/rayfield-<uid>``).

    Raises:
        ValueError: when ``address`` is neither ``"auto"`` nor ``HOST:PORT``.
        ClusterError: for ``"auto"`` when no head runs on this machine.
        UnsafeSessionError: the session files are not this user's alone.
    """
    if address is None or address == "auto":
        return find_gcs_address(temp_dir)
    if not _HOST_PORT.fullmatch(address):
        raise ValueError(f"address {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379) nor 'auto'")
    return address


def read_session_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in a session file (``node.json``, ``dashboard.json``...), or None
    when the file does not exist or does not hold a JSON object.

    Raises:
        UnsafeSessionError: the file (or a directory above it) is not this user's alone.
    """
    return session_files.read_json(path)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by this user only (mode 0600)."""
    session_files.write_private(path, text)


def clean_stopped_sessions(temp_dir: Path | None = None) -> int:
    """Remove what stopped nodes left under the session root: their socket directories and
    ``node.json``, and a ``session_latest`` left pointing at one. Logs stay.

    Args:
        temp_dir: the session root (default ``<tmp>/rayfield-<uid>``).

    Returns:
        How many stopped nodes were cleaned.

    Raises:
        UnsafeSessionError: the root or a node.json is not this user's alone (nothing
            found there is acted on).
    """
    root = session_files.existing_root(temp_dir)
    if root is None:
        return 0
    cleaned = 0
    for node_json in root.glob("session_*/node.json"):
        info = session_files.read_json(node_json)
        if info is None:
            continue
        if psutil.pid_exists(int(info.get("pid", 0))):
            continue
        sockets = Path(info.get("socket", "")).parent
        if sockets.name == "sockets" or sockets.name.startswith("rayfield-"):
            shutil.rmtree(sockets, ignore_errors=True)
        node_json.unlink(missing_ok=True)
        cleaned += 1
    latest = root / session_files.LATEST
    if latest.is_symlink() and not (latest / "node.json").exists():
        latest.unlink()
    return cleaned


def point_latest_session(session_dir: Path, temp_dir: Path | None = None) -> Path:
    """Point ``<temp_dir>/session_latest`` (default ``<tmp>/rayfield-<uid>``) at the head
    session ``session_dir``, so that ``init(address="auto")``, ``find_gcs_address`` and
    ``rayfield status`` on this machine find a cluster whose head runs under another temp
    dir. Replaces the link atomically, as ``rayfield start --head`` does.

    Returns:
        The link's path.

    Raises:
        ClusterError: ``session_dir`` is not a head session (no ``cluster.json``).
        UnsafeSessionError: the root or the session is not this user's alone.
    """
    session = Path(session_dir)
    if session_files.read_json(session / "cluster.json") is None:
        raise ClusterError(
            f"{session} is not the session of a cluster's head (no cluster.json): pass "
            "the head's session directory"
        )
    root = session_files.ensure_root(temp_dir)
    session_files.point_latest(root, session)
    return root / session_files.LATEST


def unpoint_latest_session(session_dir: Path, temp_dir: Path | None = None) -> bool:
    """Remove ``<temp_dir>/session_latest`` if it points at ``session_dir``; True when
    it did. A link to another session (a head started since) is left alone.

    Raises:
        UnsafeSessionError: the root is not this user's alone.
    """
    root = session_files.existing_root(temp_dir)
    if root is None:
        return False
    link = root / session_files.LATEST
    if not link.is_symlink() or link.resolve() != Path(session_dir).resolve():
        return False
    link.unlink(missing_ok=True)
    return True
