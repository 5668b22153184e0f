"""Ray 2.x placement group programs (``ray_programs/pg_*.py``) run unchanged but for
their imports, each as its own driver process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "ray_programs"


@pytest.mark.parametrize("program", ["pg_reserve.py", "pg_children.py"])
def test_a_ray_placement_group_program_runs(program: str, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(PROGRAMS / program)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if program == "pg_reserve.py":
        assert "actor ended with its group" in done.stdout
        assert "state: CREATED" in done.stdout
    else:
        assert "children in the group: [True, True, True]" in done.stdout
