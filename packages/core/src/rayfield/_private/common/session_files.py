"""Where session files live, and the checks made before anything found there is trusted.

Layout (``root`` is ``temp_dir=`` / ``--temp-dir``, by default :func:`default_root`)::

    root/                         0700, created by the first init() or `rayfield start`
      session_latest              symlink to the newest head's (or plain node's) session
      session_<time>_<pid>/       0700, one per node or embedded init()
        node.json cluster.json dashboard.json token gcs.port gcs.sqlite   0600
        logs/ sockets/ spill/     0700 (files in them 0600, sockets 0600)

A driver trusts what it finds there: it connects to the socket ``node.json`` names and
unpickles what that node's workers produce, and ``rayfield start --address`` sends the
token of ``cluster.json``'s cluster. So everything is checked first: a path is trusted
only when the current user owns it and neither its group nor others can write it (a
symlink is checked link by link). The default root is per user
(``<tmp>/rayfield-<uid>``), so users never share one; one that another user created first
(the name is predictable) fails the check, and the directories above it must not let
others rename it (owned by this user or root; writable by others only with the sticky
bit, as ``/tmp``). What fails a
check raises :class:`UnsafeSessionError`, whose message names the path, its owner and
mode, and what to do.

Files are created owner-only here (directories 0700, files 0600); the processes
``rayfield start`` spawns run with umask 077, so what they and their workers write is too.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from rayfield._private.common import private_files
from rayfield.exceptions import UnsafeSessionError

__all__ = [
    "UnsafeSessionError",
    "check_owned",
    "check_socket",
    "default_root",
    "ensure_root",
    "existing_root",
    "find_node",
    "latest_session",
    "new_session_dir",
    "open_private",
    "point_latest",
    "private_dir",
    "read_json",
    "write_private",
]

LATEST = "session_latest"
ERROR_MARK = "rayfield-error: "
"""A process ``rayfield start`` runs that fails for a known reason (a refused token, a
port in use) writes one line starting with this to its log; the command shows that line
alone instead of the log."""
STOPPED_SUFFIX = ".stopped"
"""Written beside the GCS database (``gcs.sqlite.stopped``) when the GCS stops cleanly
(SIGTERM, ``rayfield stop``). A head session whose GCS is gone without it was killed:
``rayfield start --head`` on the same address restarts that cluster from its database
and token (``launch.killed_head``)."""
FIX = "pass a directory only you can write with --temp-dir (CLI) or temp_dir= (init)"


def default_root() -> Path:
    """``<tmp>/rayfield-<uid>``: the default root of this user's session directories.

    ``<tmp>`` is :func:`tempfile.gettempdir` (``$TMPDIR``, else ``/tmp``). A per-user name
    keeps users apart; ``$XDG_RUNTIME_DIR`` is not used because it is a small tmpfs and
    the sessions hold logs and spilled objects.
    """
    return Path(tempfile.gettempdir()) / f"rayfield-{os.getuid()}"


def check_owned(path: Path, what: str, *, fix: str | None = None) -> os.stat_result:
    """Check that this user owns ``path`` and that neither group nor others can write it
    (:func:`rayfield.util.private_files.check_owned`, raising :class:`UnsafeSessionError`).

    Args:
        path: the file, directory, socket or symlink to check; it must exist.
        what: its name in the error message, e.g. ``"node.json"``.
        fix: what to tell the user to do (default: remove it or pick another root).

    Raises:
        UnsafeSessionError: another user owns it (or the symlink), or it is group- or
            world-writable.
        FileNotFoundError: it does not exist (or a symlink's target does not).
    """
    fix = fix or f"remove it (rm -rf {path}) or {FIX}"
    return private_files.check_owned(path, what, fix=fix, error=UnsafeSessionError)


def _check_ancestors(root: Path) -> None:
    """The directories above ``root`` must not let others rename or replace it: owned by
    this user or root, writable by group or others only with the sticky bit (as ``/tmp``)."""
    private_files.check_ancestors(
        root, what="a directory above the session root", fix=FIX, error=UnsafeSessionError
    )


def ensure_root(root: Path | None = None) -> Path:
    """Create the session root (mode 0700) if missing; check it either way.

    Args:
        root: the root directory; None for :func:`default_root`. Missing parent
            directories are created (with the default mode).

    Returns:
        ``root`` (or the default one).

    Raises:
        UnsafeSessionError: the root, or a directory above it, fails the checks of
            :func:`check_owned` / ``_check_ancestors`` (e.g. another user created it).
        NotADirectoryError: it exists and is not a directory.
    """
    root = Path(root) if root is not None else default_root()
    _check_ancestors(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    st = check_owned(root, "the session root")
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"the session root {root} is not a directory: {FIX}")
    return root


def existing_root(root: Path | None = None) -> Path | None:
    """The session root if it exists (checked as by :func:`ensure_root`), else None.

    Raises:
        UnsafeSessionError: it exists and fails the checks.
    """
    root = Path(root) if root is not None else default_root()
    if not os.path.lexists(root):
        return None
    _check_ancestors(root)
    check_owned(root, "the session root")
    return root if root.is_dir() else None


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) mode 0700, or check and tighten an existing
    one to 0700.

    Raises:
        UnsafeSessionError: it exists and is not this user's, or is group/world-writable.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_owned(path, "the directory")
    path.chmod(0o700)
    return path


def new_session_dir(root: Path | None = None) -> Path:
    """Create ``<root>/session_<time>_<pid>`` and its ``logs/``, both mode 0700.

    The root is created or checked first (:func:`ensure_root`). Two sessions made by
    one process in the same second get suffixes ``_1``, ``_2``...

    Raises:
        UnsafeSessionError: the root fails the checks.
    """
    root = ensure_root(root)
    base = f"session_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}"
    n = 0
    while True:
        session = root / (base if n == 0 else f"{base}_{n}")
        try:
            session.mkdir(mode=0o700)
            break
        except FileExistsError:
            n += 1
    (session / "logs").mkdir(mode=0o700)
    return session


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` mode 0600, atomically (a temporary file renamed over
    it: readers see the old file or the whole new one)."""
    private_files.write_text(path, text)


def open_private(path: Path) -> IO[bytes]:
    """Open ``path`` for appending bytes, created mode 0600 (an existing file of this
    user is set to 0600; a symlink or another user's file is refused)."""
    return private_files.open_private(path, "ab", error=UnsafeSessionError)


def point_latest(root: Path, session: Path) -> None:
    """Point ``<root>/session_latest`` at ``session`` (atomically replaced)."""
    tmp = root / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(session.resolve())
    tmp.replace(root / LATEST)


def latest_session(root: Path | None = None) -> Path | None:
    """The session ``<root>/session_latest`` points at, checked; None when there is none.

    Raises:
        UnsafeSessionError: the root, the link or its target fails the checks.
    """
    found = existing_root(root)
    if found is None:
        return None
    link = found / LATEST
    if not os.path.lexists(link):
        return None
    try:
        check_owned(link, LATEST)
    except FileNotFoundError:  # a link to a session that was removed
        return None
    return link.resolve()


def read_json(path: Path, what: str | None = None) -> dict[str, Any] | None:
    """The JSON object in ``path``, after :func:`check_owned`; None when it does not
    exist or is being replaced (half written or not JSON).

    Raises:
        UnsafeSessionError: it fails the checks.
    """
    try:
        check_owned(path, what or path.name)
        value = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def check_socket(path: str | os.PathLike[str]) -> str:
    """Check a node's Unix socket before connecting to it; returns it as a string.

    Raises:
        UnsafeSessionError: another user owns it, or group or others can write it.
        FileNotFoundError: it does not exist.
    """
    check_owned(Path(path), "the node socket")
    return str(path)


def find_node(address: str, root: Path | None = None) -> tuple[str, Path, dict[str, Any]]:
    """The node a driver connects to with ``init(address=...)``, checked.

    Args:
        address: ``"auto"`` (the session ``<root>/session_latest`` points at), a session
            directory, or a node's socket path.
        root: the session root for ``"auto"``; None for :func:`default_root`.

    Returns:
        ``(socket_path, session_dir, node_info)``; ``node_info`` is the node's
        ``node.json`` (empty for a bare socket path).

    Raises:
        ConnectionError: no running node there.
        UnsafeSessionError: the root, ``session_latest``, the session, ``node.json`` or
            the socket is not this user's alone.
    """
    target = Path(address)
    if address == "auto":
        found = latest_session(root)
        if found is None:
            where = root if root is not None else default_root()
            raise ConnectionError(
                f"no running rayfield node under {where} (no {LATEST}); start one with "
                "'rayfield start --head', or pass its address or session directory"
            )
        target = found
    elif os.path.exists(target) and stat.S_ISSOCK(os.stat(target).st_mode):
        return check_socket(target), target.parent.parent, {}
    node_json = target / "node.json"
    if os.path.lexists(target):
        check_owned(target, "the session directory")
    info = read_json(node_json)
    if info is None:
        raise ConnectionError(
            f"no running rayfield node at {address!r} (looked for {node_json}); start one "
            "with 'rayfield start --head' or pass its session directory"
        )
    try:
        socket_path = check_socket(info["socket"])
    except (KeyError, FileNotFoundError):
        raise ConnectionError(
            f"the node of {target} is not running (its socket {info.get('socket')} is gone)"
        ) from None
    return socket_path, target.resolve(), info
