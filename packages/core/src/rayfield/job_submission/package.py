"""Working-directory packages of submitted jobs: zip, name by content, unpack.

``JobSubmissionClient.submit_job(runtime_env={"working_dir": DIR})`` zips ``DIR``
(:func:`zip_directory`), names the archive by the SHA-256 of its bytes
(``_rayfield_pkg_<hex>.zip``) and uploads it once (the dashboard keeps one copy per name
in its session's ``job_packages/`` folder); the runtime_env sent with the job names the
package as ``pkg://_rayfield_pkg_<hex>.zip``. The supervisor unpacks it into a folder of
the job (:func:`unpack`) and runs the entrypoint there.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "MAX_PACKAGE_BYTES",
    "PACKAGE_SCHEME",
    "PackageTooLargeError",
    "is_package_uri",
    "package_name",
    "unpack",
    "zip_directory",
]

MAX_PACKAGE_BYTES = 100 * 1024 * 1024
"""The largest working directory a job may take (bytes, of the files before zipping)."""
PACKAGE_SCHEME = "pkg://"
_NAME = re.compile(r"_rayfield_pkg_[0-9a-f]{64}\.zip")


class PackageTooLargeError(ValueError):
    """A working directory holds more than :data:`MAX_PACKAGE_BYTES`."""


def zip_directory(
    directory: str | os.PathLike[str],
    excludes: Sequence[str] = (),
    max_bytes: int = MAX_PACKAGE_BYTES,
) -> bytes:
    """The files under ``directory`` as a zip archive (paths relative to it).

    Symbolic links are followed for files and skipped for directories; ``__pycache__``
    folders and the ``excludes`` patterns (``fnmatch`` on the relative path or the name)
    are left out. Entries are written in sorted order with a fixed time stamp, so the same
    files give the same bytes (and the same package name).

    Raises:
        FileNotFoundError: ``directory`` is not a directory.
        PackageTooLargeError: the files add up to more than ``max_bytes``; the message
            says how to leave files out.
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"working_dir {str(directory)!r} is not a directory")
    files: list[tuple[str, Path]] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in excludes):
                continue
            if not path.is_file():
                continue
            total += path.stat().st_size
            if total > max_bytes:
                raise PackageTooLargeError(
                    f"working_dir {str(directory)!r} holds more than {max_bytes >> 20} MiB: "
                    "leave large files out (runtime_env 'excludes') or put them in shared "
                    "storage"
                )
            files.append((rel, path))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel, path in files:
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def package_name(data: bytes) -> str:
    """The content-addressed name of a package: ``_rayfield_pkg_<sha256 hex>.zip``."""
    return f"_rayfield_pkg_{hashlib.sha256(data).hexdigest()}.zip"


def is_package_uri(value: object) -> bool:
    """Whether ``value`` is a ``pkg://_rayfield_pkg_<hex>.zip`` package URI."""
    return (
        isinstance(value, str)
        and value.startswith(PACKAGE_SCHEME)
        and bool(_NAME.fullmatch(value[len(PACKAGE_SCHEME) :]))
    )


def check_name(name: str) -> str:
    """``name`` when it is a package name (``ValueError`` otherwise: nothing else may name
    a file in the package folder)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a package name (_rayfield_pkg_<sha256>.zip)")
    return name


def unpack(data: bytes, target: str | os.PathLike[str]) -> Path:
    """Extract the archive ``data`` into ``target`` (created 0700).

    Raises:
        ValueError: the archive is not a zip file, or an entry would land outside
            ``target`` (an absolute path or ``..``).
    """
    root = Path(target)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"the job's working_dir package is not a zip archive: {exc}") from None
    with archive:
        for info in archive.infolist():
            dest = (root / info.filename).resolve()
            if not dest.is_relative_to(root.resolve()):
                raise ValueError(f"package entry {info.filename!r} points outside its folder")
        archive.extractall(root)
        for info in archive.infolist():
            mode = (info.external_attr >> 16) & 0o700
            if mode and not info.is_dir():
                os.chmod(root / info.filename, mode)
    return root
