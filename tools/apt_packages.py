"""Install Debian packages with apt-get, for the repository's ``install_*`` tools.

``tools/install_sshd.py`` and ``tools/install_browser.py`` first look for the programs
the tests need and call :func:`apt_get_install` only when one is missing. It runs
``apt-get update`` then ``apt-get install -y --no-install-recommends`` non-interactively,
and only as root on a machine that has apt-get; anything else is a ``RuntimeError`` whose
message is the caller's hint (what to install, and how).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence


def apt_get_install(packages: Sequence[str], hint: str) -> None:
    """Install ``packages`` with apt-get, printing each command before it runs.

    A package's service is not started in a container (its ``policy-rc.d`` answers 101).

    Args:
        packages: Debian package names.
        hint: says what to install and how; it starts the message of every error.

    Raises:
        RuntimeError: not root, no apt-get on the PATH, or an apt-get command failed.
    """
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise RuntimeError(
            f"{hint} (this tool installs {', '.join(packages)} itself only as root with apt-get)"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", *packages],
    ):
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=env, check=False).returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed; {hint}")


def find_programs(programs: Mapping[str, str]) -> dict[str, str] | None:
    """The path of each program (name -> an absolute path or a name on the PATH), or None
    when one is missing."""
    found = {}
    for name, where in programs.items():
        path = where if os.access(where, os.X_OK) else shutil.which(where)
        if not path:
            return None
        found[name] = path
    return found


def ensure_programs(
    programs: Mapping[str, str], packages: Sequence[str], hint: str
) -> dict[str, str]:
    """The programs' paths: those found here, else Debian's ``packages`` installed now.

    Raises:
        RuntimeError: one is missing and cannot be installed here (not root, no apt-get,
            or the install failed); the message says what to do.
    """
    found = find_programs(programs)
    if found:
        return found
    apt_get_install(packages, hint)
    found = find_programs(programs)
    if found is None:
        raise RuntimeError(
            f"installed {', '.join(packages)} but a program is still missing; {hint}"
        )
    return found


def main_for(programs: Mapping[str, str], packages: Sequence[str], hint: str) -> int:
    """An ``install_*`` tool's main: print each program's path (installing first if
    needed); 1 with the error on stderr when that fails."""
    try:
        found = ensure_programs(programs, packages, hint)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    for name, path in found.items():
        print(f"{name}: {path}")
    return 0
