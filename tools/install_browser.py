"""Find or install the Chromium that the dashboard's browser tests drive through Playwright.

Playwright's own browser download comes from a CDN that CI machines may not reach, so the
tests use a system Chromium instead (``chromium.launch(executable_path=...)``). This tool
is idempotent: it prints the path of a Chromium already here, else installs Debian's
``chromium`` package with apt-get when run as root, else fails saying what to install.

Usage::

    python3 tools/install_browser.py          # prints the executable's path

Browser tests launch it through :func:`headless_chromium` (loaded from this file by path,
as ``tools/`` is no package)::

    tool = runpy.run_path("tools/install_browser.py")
    with tool["headless_chromium"]() as browser:  # a playwright.sync_api.Browser
        page = browser.new_context().new_page()

Lookup order: ``$RAYFIELD_CHROMIUM``; ``chromium``, ``chromium-browser``,
``chromium-headless-shell``, ``google-chrome`` on the PATH; a browser Playwright itself
downloaded (``~/.cache/ms-playwright``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser

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


@contextlib.contextmanager
def headless_chromium() -> Iterator[Browser]:
    """Headless Chromium driven by Playwright (the system browser :func:`find_chromium`
    finds), closed on exit, as is Playwright's driver process.

    Raises:
        RuntimeError: no working Chromium here; the message says how to get one.
        ImportError: Playwright is not installed (the test extras of rayfield-cli and
            rayfield-core have it).
    """
    from playwright.sync_api import sync_playwright

    executable = find_chromium()
    if executable is None:
        raise RuntimeError(f"{HINT}; or run `python3 tools/install_browser.py` (as root)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def install() -> str:
    """A Chromium executable: the one found here, else Debian's package installed now.

    Raises:
        RuntimeError: when none is found and it cannot be installed here (not root, no
            apt-get, or the install failed); the message says what to do.
    """
    found = find_chromium()
    if found:
        return found
    from apt_packages import apt_get_install  # a sibling: tools/ is sys.path[0] for a script

    apt_get_install(["chromium"], HINT)
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
