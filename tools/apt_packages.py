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
from collections.abc import Sequence


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
