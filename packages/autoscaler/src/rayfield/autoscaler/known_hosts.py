"""A cluster's SSH known-hosts file: the host keys of its nodes, pinned at first contact.

:class:`~rayfield.autoscaler.command_runner.SSHCommandRunner` runs ``ssh`` with
``StrictHostKeyChecking=accept-new`` and ``UserKnownHostsFile`` set to the cluster
directory's ``known_hosts`` (``NodeSetup`` passes it): the first connection to an
address records its key, and a later connection to that address that presents another
key is refused (``Host key verification failed``). The file is kept through
:mod:`rayfield.util.private_files` (0600, this user's alone, in the private cluster
directory). Entries are written unhashed (``HashKnownHosts=no``) so that
:func:`forget` can remove a terminated cloud node's address, which a new machine may get
next.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rayfield.util import private_files

__all__ = ["HOST_KEY_REFUSED", "forget", "option_value", "prepare"]

#: What ``ssh`` prints when a host's key differs from the one recorded for it.
HOST_KEY_REFUSED = "Host key verification failed"


def prepare(path: Path) -> Path:
    """Create ``path`` empty (0600) when missing, or check it (this user's alone, set
    to 0600), before ``ssh`` reads and appends to it.

    Raises:
        UnsafeFileError: it or a directory above is not this user's alone.
    """
    with private_files.open_private(path, "ab", what="the cluster's known_hosts"):
        pass
    return path


def option_value(path: Path) -> str:
    """``path`` as a value of ssh's ``UserKnownHostsFile`` option: in double quotes
    (the option takes a list separated by spaces) with ``%`` doubled (ssh expands
    ``%`` tokens in it)."""
    text = str(path).replace("%", "%%")
    if '"' in text:
        raise ValueError(f"a known_hosts path may not contain a double quote: {path}")
    return f'"{text}"'


def _names(hosts: Iterable[str], port: int) -> set[str]:
    return {h if port == 22 else f"[{h}]:{port}" for h in hosts}


def forget(path: Path, hosts: Iterable[str], port: int = 22) -> int:
    """Remove the keys recorded for ``hosts`` (addresses or names, at ``port``) from the
    known-hosts file; the number of lines removed. A missing file has none.

    Raises:
        UnsafeFileError: the file or a directory above is not this user's alone.
    """
    names = _names(hosts, port)
    try:
        text = private_files.read_text(path, what="the cluster's known_hosts")
    except FileNotFoundError:
        return 0
    kept, removed = [], 0
    for line in text.splitlines(keepends=True):
        fields = line.split()
        if fields and not fields[0].startswith("#") and names & set(fields[0].split(",")):
            removed += 1
        else:
            kept.append(line)
    if removed:
        private_files.write_text(path, "".join(kept))
    return removed
