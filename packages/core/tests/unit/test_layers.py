"""The layer check of `nox -s lint` (tools/check_layers.py with `.importlinter`).

Each check runs in a child process (the check puts a merged copy of the packages first on
``sys.path``, which needs a process that has not imported rayfield). The failing cases
run on a copy of the repository's packages with one import added that breaks a rule.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "tools" / "check_layers.py"
CONFIG = REPO / ".importlinter"


def run_check(root: Path, config: Path = CONFIG) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=240,
    )


def core_layers_only(tmp_path: Path) -> Path:
    """The config with only the core's layers contract (the boundary of the other
    packages is checked on the repository as it is)."""
    text = CONFIG.read_text()
    config = tmp_path / "layers.importlinter"
    config.write_text(text[: text.index("[importlinter:contract:public-api-boundary]")])
    return config


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The packages' sources under ``tmp_path/repo``."""
    root = tmp_path / "repo"
    for src in REPO.glob("packages/*/src"):
        shutil.copytree(
            src,
            root / src.relative_to(REPO),
            ignore=shutil.ignore_patterns("*.so", "__pycache__", "fb"),
        )
    return root


def add_import(module: Path, line: str) -> None:
    text = module.read_text()
    anchor = "from __future__ import annotations\n"
    module.write_text(text.replace(anchor, anchor + line + "\n", 1))


def test_the_core_keeps_its_layers_and_has_no_cycle(tmp_path: Path) -> None:
    result = run_check(REPO, core_layers_only(tmp_path))
    out = result.stdout + result.stderr
    assert "rayfield-core layers" in out and "KEPT" in out, out
    assert result.returncode == 0, out


def test_a_lower_layer_importing_a_higher_one_fails(repo_copy: Path, tmp_path: Path) -> None:
    common = repo_copy / "packages/core/src/rayfield/_private/common/ids.py"
    add_import(common, "from rayfield._private.runtime import runtime as _layer_breach")
    result = run_check(repo_copy, core_layers_only(tmp_path))
    assert result.returncode == 1
    assert "rayfield-core layers" in result.stdout and "BROKEN" in result.stdout
    assert "rayfield._private.common.ids -> rayfield._private.runtime.runtime" in result.stdout


def test_a_lazy_import_upwards_fails_too(repo_copy: Path, tmp_path: Path) -> None:
    context = repo_copy / "packages/core/src/rayfield/_private/context.py"
    text = context.read_text()
    context.write_text(
        text.replace(
            "    global _current\n    previous,",
            "    global _current\n    from rayfield import api  # noqa\n\n    previous,",
        )
    )
    result = run_check(repo_copy, core_layers_only(tmp_path))
    assert result.returncode == 1
    assert "rayfield._private.context -> rayfield.api" in result.stdout


def test_a_cycle_fails(repo_copy: Path, tmp_path: Path) -> None:
    # Two modules of one layer that import each other: allowed by the layers, not here.
    actor = repo_copy / "packages/core/src/rayfield/actor.py"
    add_import(actor, "import rayfield.api as _cycle")
    result = run_check(repo_copy, core_layers_only(tmp_path))
    assert result.returncode == 1
    cycles = [line for line in result.stdout.splitlines() if "import cycle" in line]
    assert any("rayfield.actor" in c and "rayfield.api" in c for c in cycles), result.stdout


def test_a_private_import_from_another_package_fails(repo_copy: Path) -> None:
    tune = repo_copy / "packages/tune/src/rayfield/tune/__init__.py"
    add_import(tune, "from rayfield._private import context as _private_use")
    result = run_check(repo_copy)
    assert result.returncode == 1
    assert "rayfield.tune is not allowed to import rayfield._private" in result.stdout
    assert "rayfield.tune -> rayfield._private.context" in result.stdout
