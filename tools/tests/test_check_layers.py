"""tools/check_layers.py: the cycles it finds among each package's modules (every
package, imports inside functions and under TYPE_CHECKING included), the modules it finds
too long, and what it prints and exits with, on tiny fake repositories in ``tmp_path``.

The whole check runs in a child process (it puts a merged copy of the fake packages first
on ``sys.path``, which needs a process that has not imported rayfield); it needs grimp and
import-linter (which the lint session installs), not the packages.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parent.parent
SCRIPT = TOOLS / "check_layers.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cl = _load()

CONFIG = """\
[importlinter]
root_package = rayfield

[importlinter:contract:boundary]
name = fake packages import no rayfield._private module
type = forbidden
source_modules =
    rayfield.fake
forbidden_modules =
    rayfield._private
allow_indirect_imports = True
"""


def write(root: Path, rel: str, source: str = "") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def fake_repo(root: Path) -> Path:
    """A core (``rayfield``, ``rayfield._private``) and a package ``fake`` whose modules
    ``a`` -> ``b`` -> ``c`` import each other in a line (no cycle); ``fake.b`` also
    imports the core, and the core a module of ``fake`` (a cycle across packages, which
    is no cycle of either package)."""
    core = "packages/core/src/rayfield"
    write(root, f"{core}/__init__.py", "from rayfield import api\n")
    write(root, f"{core}/api.py", "from rayfield import _private\n")
    write(root, f"{core}/_private/__init__.py", "from rayfield.fake import c\n")
    fake = "packages/fake/src/rayfield/fake"
    write(root, f"{fake}/__init__.py")
    write(root, f"{fake}/a.py", "from rayfield.fake import b\n")
    write(root, f"{fake}/b.py", "import rayfield.api\nfrom rayfield.fake import c\n")
    write(root, f"{fake}/c.py", "import json\n")
    write(root, ".importlinter", CONFIG)
    return root


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )


# -- the parts, in this process ---------------------------------------------------------


def test_strongly_connected_finds_each_cycle_not_the_chains() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"f"}}
    assert sorted(cl.strongly_connected("abcdef", edges)) == [["a", "b", "c"], ["d", "e"]]
    assert cl.strongly_connected("abc", {"a": {"b"}, "b": {"c"}}) == []


def test_a_cycle_is_among_one_packages_modules() -> None:
    packages = {"x.a": "x", "x.b": "x", "y.a": "y", "y.b": "y"}
    # x.a -> y.a -> x.a crosses packages: no cycle of x or y; y.a <-> y.b is one of y.
    imports = {"x.a": {"y.a", "x.b"}, "y.a": {"x.a", "y.b"}, "y.b": {"y.a"}}
    assert cl.package_cycles(packages, imports) == [("y", ["y.a", "y.b"])]


def test_long_modules_lists_each_with_its_length_generated_code_aside(tmp_path: Path) -> None:
    write(tmp_path, "packages/p/src/rayfield/p/short.py", "x = 1\n" * 600)
    write(tmp_path, "packages/p/src/rayfield/p/long.py", "x = 1\n" * 601)
    write(tmp_path, "packages/s/src/rayfield/s/protocol/fb/Gen.py", "x = 1\n" * 900)
    assert cl.long_modules(tmp_path) == [("packages/p/src/rayfield/p/long.py", 601)]


def test_merge_tree_names_each_modules_package(tmp_path: Path) -> None:
    root = fake_repo(tmp_path / "repo")
    packages = cl.merge_tree(root, tmp_path / "merged")
    assert packages == {
        "rayfield": "core",
        "rayfield.api": "core",
        "rayfield._private": "core",
        "rayfield.fake": "fake",
        "rayfield.fake.a": "fake",
        "rayfield.fake.b": "fake",
        "rayfield.fake.c": "fake",
    }
    assert (tmp_path / "merged/rayfield/fake/a.py").is_file()


# -- the script, in a child process ------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    pytest.importorskip("grimp")
    pytest.importorskip("importlinter")
    return fake_repo(tmp_path / "repo")


def test_a_repo_without_cycles_passes(repo: Path) -> None:
    result = run_check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no import cycle in any package" in result.stdout


def test_a_cycle_in_any_package_fails_and_is_printed(repo: Path) -> None:
    write(repo, "packages/fake/src/rayfield/fake/c.py", "from rayfield.fake import a\n")
    result = run_check(repo)
    assert result.returncode == 1
    assert (
        "FAIL: import cycle among rayfield-fake's modules: "
        "rayfield.fake.a, rayfield.fake.b, rayfield.fake.c" in result.stdout
    ), result.stdout


def test_lazy_and_type_checking_imports_count(repo: Path) -> None:
    fake = "packages/fake/src/rayfield/fake"
    write(
        repo,
        f"{fake}/c.py",
        """\
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from rayfield.fake.b import something
        """,
    )
    write(repo, f"{fake}/d.py", "def f():\n    from rayfield.fake import e\n")
    write(repo, f"{fake}/e.py", "def g():\n    import rayfield.fake.d\n")
    result = run_check(repo)
    assert result.returncode == 1
    out = result.stdout
    assert "rayfield-fake's modules: rayfield.fake.b, rayfield.fake.c" in out, out
    assert "rayfield-fake's modules: rayfield.fake.d, rayfield.fake.e" in out, out


def test_a_long_module_fails_with_its_length(repo: Path) -> None:
    write(repo, "packages/fake/src/rayfield/fake/big.py", "x = 1\n" * 601)
    result = run_check(repo)
    assert result.returncode == 1
    assert (
        "FAIL: module over 600 lines: packages/fake/src/rayfield/fake/big.py (601 lines)"
        in result.stdout
    ), result.stdout
