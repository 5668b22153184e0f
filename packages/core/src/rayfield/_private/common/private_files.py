"""Owner-only files: the checks and the ways of creating, reading and writing them.

The public face is :mod:`rayfield.util.private_files` (every package keeps its files
through it); ``session_files`` builds the session layout on the same functions.

A path is trusted when:

- the current user owns it and neither group nor others can write it (a symlink must be
  this user's too, and its target is checked the same way, link by link);
- every directory above it is owned by the current user or by root, and one that group
  or others can write has the sticky bit (as ``/tmp``). Without this, the owner of a
  directory above (or anyone who can write it) could rename the trusted path away and put
  their own in its place.

Directories are created 0700 and files 0600. Reads and writes open with ``O_NOFOLLOW``
and check the open file descriptor, so a file swapped for a symlink or for another
user's file between a check and the open is refused.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rayfield.exceptions import UnsafeFileError

MAX_LINKS = 8  # symlinks followed, one after the other, before a path is refused
LOOSE = stat.S_IWGRP | stat.S_IWOTH
StrPath = str | os.PathLike[str]


def describe(st: os.stat_result) -> str:
    """``owned by NAME (uid N), mode M`` for an error message."""
    try:
        import pwd

        owner = f"{pwd.getpwuid(st.st_uid).pw_name} (uid {st.st_uid})"
    except (ImportError, KeyError):
        owner = f"uid {st.st_uid}"
    return f"owned by {owner}, mode {stat.S_IMODE(st.st_mode):o}"


def refuse(
    what: str,
    path: StrPath,
    st: os.stat_result,
    why: str,
    fix: str,
    error: type[UnsafeFileError] = UnsafeFileError,
) -> UnsafeFileError:
    return error(
        f"refusing {what} {path} ({describe(st)}): {why}, so another user could control "
        f"what rayfield reads or runs there; {fix}"
    )


def _default_fix(path: StrPath) -> str:
    return f"remove it (rm -rf {path}) or use a directory only you can write"


def check_owned(
    path: StrPath,
    what: str,
    *,
    fix: str | None = None,
    error: type[UnsafeFileError] = UnsafeFileError,
) -> os.stat_result:
    """Check that this user owns ``path`` and that neither group nor others can write it.

    A symlink must be this user's, and so must its target (checked the same way). Returns
    the ``stat`` of the final target. The directories above are not checked here (see
    :func:`check_ancestors`).

    Raises:
        UnsafeFileError (or ``error``): another user owns it or the symlink, it is group-
            or world-writable, or it is a chain of more than 8 symlinks.
        FileNotFoundError: it does not exist (or a symlink's target does not).
    """
    path = Path(path)
    fix = fix or _default_fix(path)
    me = os.getuid()
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid != me:
            raise refuse(what, path, st, f"the symlink is not yours (you are uid {me})", fix, error)
        if what.count("the target of") >= MAX_LINKS:
            raise refuse(what, path, st, "it is a chain of too many symlinks", fix, error)
        target = path.parent / os.readlink(path)  # relative to the link's directory
        return check_owned(target, f"the target of {what}", fix=fix, error=error)
    if st.st_uid != me:
        raise refuse(what, path, st, f"it is not yours (you are uid {me})", fix, error)
    if st.st_mode & LOOSE:
        fix = f"make it private (chmod go-w {path}) or {fix}"
        raise refuse(what, path, st, "its group or others can write it", fix, error)
    return st


def _check_ancestor(
    parent: StrPath, st: os.stat_result, what: str, fix: str, error: type[UnsafeFileError]
) -> None:
    me = os.getuid()
    if st.st_uid not in (me, 0):
        why = f"it belongs to another user (you are uid {me}), who could rename what is in it"
        raise refuse(what, parent, st, why, fix, error)
    if st.st_mode & LOOSE and not st.st_mode & stat.S_ISVTX:
        why = "others can write it without the sticky bit (they could rename what is in it)"
        raise refuse(what, parent, st, why, f"use chmod +t {parent}, or {fix}", error)


def check_ancestors(
    path: StrPath,
    *,
    what: str = "a directory above",
    fix: str | None = None,
    error: type[UnsafeFileError] = UnsafeFileError,
) -> None:
    """Check every directory above ``path``: owned by this user or root, and writable by
    group or others only with the sticky bit. Missing ones are skipped. A symlink on the
    way must be this user's or root's, and the directories above its target are checked
    too.

    One ``lstat`` per directory above (string paths: Tune checks each file it opens);
    the symlinks are resolved only when one of them is a symlink.

    Raises:
        UnsafeFileError (or ``error``): one of them fails, named in the message.
    """
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if parent == full:  # "/" has nothing above it
        return
    fix = fix or "use a directory whose parents only you (or root) can change"
    linked = False
    current = parent
    while True:
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            pass
        else:
            _check_ancestor(current, st, what, fix, error)
            linked = linked or stat.S_ISLNK(st.st_mode)
        above = os.path.dirname(current)
        if above == current:
            break
        current = above
    if not linked:  # no symlink on the way: the real directories are the ones checked
        return
    real = Path(os.path.realpath(parent))
    if str(real) != parent:
        for real_parent in (real, *real.parents):
            with contextlib.suppress(FileNotFoundError):
                _check_ancestor(real_parent, os.stat(real_parent), what, fix, error)


def ensure_private_dir(
    path: StrPath,
    *,
    what: str = "the directory",
    fix: str | None = None,
    error: type[UnsafeFileError] = UnsafeFileError,
) -> Path:
    """Create ``path`` and any missing parents mode 0700, or check an existing one.

    An existing directory of this user is set to 0700. Returns ``path``.

    Raises:
        UnsafeFileError (or ``error``): it or a directory above fails the checks (another
            user owns it or can write it, or can rename it away).
        NotADirectoryError: it exists and is not a directory.
    """
    path = Path(path)
    check_ancestors(path, fix=fix, error=error)
    missing = []  # the missing directories, innermost first
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        above = os.path.dirname(current)
        if above == current:
            break
        current = above
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
    if missing:  # again: the ones just made, or raced in
        check_ancestors(path, fix=fix, error=error)
    st = check_owned(path, what, fix=fix, error=error)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{what} {path} is not a directory")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


_FLAGS = {
    "r": os.O_RDONLY,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
}


def open_private(
    path: StrPath,
    mode: str = "rb",
    *,
    what: str | None = None,
    fix: str | None = None,
    encoding: str = "utf-8",
    buffering: int = -1,
    error: type[UnsafeFileError] = UnsafeFileError,
    ancestors_checked: bool = False,
) -> IO[Any]:
    """Open a private file: ``mode`` is ``r``/``w``/``a``, with ``b`` for bytes.

    Opened with ``O_NOFOLLOW`` (a symlink is refused); the open file must be a regular file
    this user owns that neither group nor others can write, and the directories above pass
    :func:`check_ancestors`. A file created for writing is 0600, and an existing one written
    or appended to is set to 0600. ``fix`` is what a refusal tells the user to do (default:
    remove the file); ``buffering`` is :func:`open`'s (0: unbuffered, bytes only).
    ``ancestors_checked``: the caller has just made the file's directory private
    (:func:`ensure_private_dir`), so the walk over the directories above is not repeated
    (the file itself is checked all the same).

    Raises:
        UnsafeFileError (or ``error``): it is a symlink, not a regular file, not this
            user's, writable by others, or a directory above fails.
        FileNotFoundError: reading a file that does not exist.
        ValueError: ``mode`` is not one of the above.
    """
    kind = mode.replace("b", "")
    if kind not in _FLAGS or mode.count("b") > 1:
        raise ValueError(f"mode must be r, w or a, with an optional b; got {mode!r}")
    path = os.fspath(path)
    what = what or os.path.basename(path)
    if not ancestors_checked:
        check_ancestors(path, fix=fix, error=error)
    fix = fix or _default_fix(path)
    # O_NONBLOCK: opening a FIFO must not wait for its other end (it is refused below).
    flags = _FLAGS[kind] | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if (os.path.lexists(path) and not os.path.isfile(path)) or os.path.islink(path):
            st = os.lstat(path)
            why = "it is a symlink" if os.path.islink(path) else "it is not a regular file"
            raise refuse(what, path, st, why, fix, error) from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(what, path, st, "it is not a regular file", fix, error)
        if st.st_uid != os.getuid():
            why = f"it is not yours (you are uid {os.getuid()})"
            raise refuse(what, path, st, why, fix, error)
        if kind == "r" and st.st_mode & LOOSE:
            loose = f"make it private (chmod go-w {path}) or {fix}"
            raise refuse(what, path, st, "its group or others can write it", loose, error)
        if kind != "r" and stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if "b" in mode:
        return os.fdopen(fd, mode, buffering)
    return os.fdopen(fd, mode, buffering, encoding=encoding)


_TMP_NUMBERS = itertools.count()  # the temporary files' names: one number per write


@contextlib.contextmanager
def atomic_write(
    path: StrPath,
    *,
    binary: bool = True,
    error: type[UnsafeFileError] = UnsafeFileError,
    ancestors_checked: bool = False,
) -> Iterator[IO[Any]]:
    """Write ``path`` (mode 0600) all at once: a temporary file in the same directory,
    renamed over ``path`` when the ``with`` block ends without an error (removed if it
    raises). Readers see the old file or the whole new one.

    The directories above must pass :func:`check_ancestors` (the one it is written in
    included: this user's or root's, and sticky if others can write it, as ``/tmp``). The
    temporary file is created with ``O_EXCL`` and ``O_NOFOLLOW``, and in a sticky directory
    no other user can replace or remove it or the result.

    ``ancestors_checked``: as :func:`open_private`'s.

    Raises:
        UnsafeFileError (or ``error``): a directory above fails the checks.
        PermissionError: ``path`` exists and is another user's, in a sticky directory.
    """
    path = os.fspath(path)
    if not ancestors_checked:
        check_ancestors(path, error=error)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.{next(_TMP_NUMBERS):x}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_bytes(
    path: StrPath, *, max_bytes: int | None = None, what: str | None = None, fix: str | None = None
) -> bytes:
    """The bytes of a private file (checked as by :func:`open_private`).

    Raises:
        UnsafeFileError: it fails the checks.
        FileNotFoundError: it does not exist.
        ValueError: it is larger than ``max_bytes``.
    """
    with open_private(path, "rb", what=what, fix=fix) as f:
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes")
    return bytes(data)


def read_text(
    path: StrPath, *, max_bytes: int | None = None, what: str | None = None, fix: str | None = None
) -> str:
    """The UTF-8 text of a private file (checked as by :func:`open_private`).

    Raises:
        UnsafeFileError: it fails the checks.
        FileNotFoundError: it does not exist.
        ValueError: it is not UTF-8, or is larger than ``max_bytes``.
    """
    return read_bytes(path, max_bytes=max_bytes, what=what, fix=fix).decode("utf-8")


def read_json(
    path: StrPath, *, max_bytes: int | None = None, what: str | None = None, fix: str | None = None
) -> Any:
    """The JSON value in a private file (checked as by :func:`open_private`).

    Raises:
        UnsafeFileError: it fails the checks.
        FileNotFoundError: it does not exist.
        ValueError: it is not JSON (``json.JSONDecodeError``) or is over ``max_bytes``.
    """
    return json.loads(read_bytes(path, max_bytes=max_bytes, what=what, fix=fix))


def write_bytes(path: StrPath, data: bytes, *, ancestors_checked: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically, mode 0600 (see :func:`atomic_write`,
    also for ``ancestors_checked``)."""
    with atomic_write(path, ancestors_checked=ancestors_checked) as f:
        f.write(data)


def write_text(path: StrPath, text: str, *, ancestors_checked: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically, mode 0600."""
    write_bytes(path, text.encode("utf-8"), ancestors_checked=ancestors_checked)


def write_json(path: StrPath, value: Any, *, indent: int | None = None) -> None:
    """Replace ``path`` with ``value`` as JSON atomically, mode 0600.

    Raises:
        TypeError: ``value`` is not JSON-serializable (nothing is written).
    """
    write_bytes(path, json.dumps(value, indent=indent).encode("utf-8"))
