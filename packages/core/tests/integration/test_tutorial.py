"""The reference's tutorial code runs with only the import changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_ray_tutorial_runs_unchanged_but_for_the_import(tmp_path: Path) -> None:
    script = Path(__file__).with_name("tutorial_ray07.py")
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tutorial ok" in proc.stdout
