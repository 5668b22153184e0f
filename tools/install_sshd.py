"""Find or install the OpenSSH server, client and rsync that the autoscaler's SSH tests use.

The tests of ``rayfield.autoscaler``'s SSH node updater and ``local`` provider start real
``sshd`` instances in network namespaces of their own (as root). This tool is
idempotent: it prints the paths of the programs when they are all here, else installs
Debian's ``openssh-server``, ``openssh-client`` and ``rsync`` packages with apt-get when
run as root, else fails saying what to install. The package's service is not started
(the tests start their own ``sshd`` per namespace).

Usage::

    python3 tools/install_sshd.py          # prints the programs' paths
"""

from __future__ import annotations

# a sibling: tools/ is sys.path[0] for a script, and importers put it there first
from apt_packages import ensure_programs, main_for
from apt_packages import find_programs as find_named

PROGRAMS = {"sshd": "/usr/sbin/sshd", "ssh": "ssh", "ssh-keygen": "ssh-keygen", "rsync": "rsync"}
PACKAGES = ("openssh-server", "openssh-client", "rsync")
HINT = (
    "the autoscaler's SSH tests need sshd, ssh, ssh-keygen and rsync: install them "
    "(Debian/Ubuntu: `sudo apt-get install openssh-server openssh-client rsync`)"
)


def find_programs() -> dict[str, str] | None:
    """The path of each program, or None when one is missing."""
    return find_named(PROGRAMS)


def install() -> dict[str, str]:
    """The programs' paths: those found here, else Debian's packages installed now.

    Raises:
        RuntimeError: when one is missing and cannot be installed here (not root, no
            apt-get, or the install failed); the message says what to do.
    """
    return ensure_programs(PROGRAMS, PACKAGES, HINT)


if __name__ == "__main__":
    raise SystemExit(main_for(PROGRAMS, PACKAGES, HINT))
