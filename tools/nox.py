"""Run nox from a private virtual environment, creating it on first use.

The README's commands go through this script so that a fresh machine needs
only Python (3.10+) and a C++ compiler:

    python3 tools/nox.py -s demo     # the main job, end to end
    python3 tools/nox.py -s tests    # every package's test suite

Arguments are passed to nox unchanged. The environment lives in
``.nox-bootstrap/`` at the repository root (ignored by git).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = ROOT / ".nox-bootstrap"
NOX_REQUIREMENT = "nox>=2024.4.15"


def main() -> int:
    if sys.version_info < (3, 10):  # noqa: UP036 (explains, instead of failing later)
        sys.exit(f"rayfield needs Python 3.10 or newer, this is {sys.version.split()[0]}")
    python = ENV / "bin" / "python"
    if not (ENV / "bin" / "nox").exists():
        print(f"creating {ENV.relative_to(ROOT)} with {NOX_REQUIREMENT} ...", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(ENV)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", NOX_REQUIREMENT], check=True
        )
    os.chdir(ROOT)
    cmd = [str(python), "-m", "nox", "--noxfile", str(ROOT / "noxfile.py"), *sys.argv[1:]]
    return subprocess.call(cmd)


if __name__ == "__main__":
    raise SystemExit(main())
