"""Find or install the Chromium that the dashboard's browser tests drive through Playwright.

Playwright's own browser download comes from a CDN that CI machines may not reach, so the
tests use a system Chromium instead (``chromium.launch(executable_path=...)``). This tool
is idempotent: it prints the path of a Chromium already here, else installs Debian's
``chromium`` package with apt-get when run as root, else fails saying what to install.

Usage::

    python3 tools/install_browser.py          # prints the executable's path

Lookup order: ``$RAYFIELD_CHROMIUM``; ``chromium``, ``chromium-browser``,
``chromium-headless-shell``, ``google-chrome`` on the PATH; a browser Playwright itself
downloaded (``~/.cache/ms-playwright``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ENV = "RAYFIELD_CHROMIUM"
NAMES = ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome")
PLAYWRIGHT_GLOBS = (
    "chromium_headless_shell-*/chrome-linux/headless_shell",
    "chromium-*/chrome-linux/chrome",
)
HINT = (
    "no Chromium for the dashboard's browser tests: install one (Debian/Ubuntu: "
    "`sudo apt-get install chromium`; or `python -m playwright install chromium` where "
    f"Playwright's download site is reachable), or set {ENV} to its executable"
)


def _runs(path: str) -> bool:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def find_chromium() -> str | None:
    """The path of a working Chromium executable, or None."""
    candidates = [os.environ.get(ENV, "")]
    candidates += [shutil.which(name) or "" for name in NAMES]
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache/ms-playwright")
    for pattern in PLAYWRIGHT_GLOBS:
        candidates += [str(p) for p in sorted(cache.glob(pattern), reverse=True)]
    for path in candidates:
        if path and os.access(path, os.X_OK) and _runs(path):
            return path
    return None


def install() -> str:
    """A Chromium executable: the one found here, else Debian's package installed now.

    Raises:
        RuntimeError: when none is found and it cannot be installed here (not root, no
            apt-get, or the install failed); the message says what to do.
    """
    found = find_chromium()
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise RuntimeError(HINT + " (this tool installs it itself only as root with apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
    ):
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=env).returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed; {HINT}")
    found = find_chromium()
    if found is None:
        raise RuntimeError(f"apt-get installed chromium but it does not run; {HINT}")
    return found


def main() -> int:
    try:
        print(install())
    except RuntimeError as exc:
        print(f"install_browser: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
