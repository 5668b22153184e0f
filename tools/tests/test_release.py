"""tools/release.py: version ranges, changelog sections, `check` and `bump` on a small
copy of the repository's layout (no package is built or imported)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release", TOOLS / "release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


rel = _load()
DATE = "2026-12-24"


def changelog(name: str, unreleased: str = "", version: str = "0.1.0") -> str:
    return (
        f"# Changelog: {name}\n\nIntro.\n\n## [Unreleased]\n\n{unreleased}\n\n"
        f"## [{version}] - 2026-12-02\n\n- First release.\n"
    )


def make_package(
    root: Path,
    key: str,
    version: str = "0.1.0",
    deps: list[str] | None = None,
    extras: dict[str, list[str]] | None = None,
    unreleased: str = "",
    init_version: str | None = None,
) -> Path:
    path = root / "packages" / key
    (path / "src" / "rayfield" / key).mkdir(parents=True)
    lines = [
        "[project]",
        f'name = "rayfield-{key}"',
        f'version = "{version}"',
        "dependencies = [",
        *[f'  "{d}",' for d in deps or []],
        "]",
        "",
        "[project.optional-dependencies]",
        *[f"{k} = {v!r}".replace("'", '"') for k, v in (extras or {}).items()],
        "",
    ]
    (path / "pyproject.toml").write_text("\n".join(lines))
    (path / "CHANGELOG.md").write_text(changelog(f"rayfield-{key}", unreleased, version))
    init = path / "src" / "rayfield" / key / "__init__.py"
    init.write_text(f'"""{key}"""\n\n__version__ = "{init_version or version}"\n')
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    make_package(tmp_path, "store", deps=["flatbuffers==25.12.19"])
    make_package(
        tmp_path,
        "core",
        deps=["rayfield-store>=0.1,<0.2", "numpy>=1.24"],
        extras={"default": ["aiohttp>=3.9", "rayfield-cli>=0.1,<0.2"]},
        unreleased="- Faster puts.",
    )
    make_package(tmp_path, "cli", deps=["rayfield-core[dashboard]>=0.1,<0.2", "click>=8.1"])
    make_package(
        tmp_path,
        "tune",
        deps=["rayfield-core>=0.1,<0.2"],
        extras={"test": ["pytest>=8", "rayfield-core[dashboard]>=0.1,<0.2"]},
    )
    return tmp_path


# ---- ranges ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "version", "inside"),
    [
        (">=0.1,<0.2", "0.1.0", True),
        (">=0.1,<0.2", "0.1.7", True),
        (">=0.1,<0.2", "0.2.0", False),
        (">=0.1,<0.2", "0.0.9", False),
        (">=1.0,<2", "1.9.3", True),
        (">=1.0,<2", "2.0.0", False),
        ("==0.1.0", "0.1", True),
    ],
)
def test_spec_contains(spec: str, version: str, inside: bool) -> None:
    assert rel.spec_contains(spec, rel.parse_version(version)) is inside


@pytest.mark.parametrize(
    ("version", "level", "new"),
    [("0.1.0", "patch", "0.1.1"), ("0.1.4", "minor", "0.2.0"), ("0.9.2", "major", "1.0.0")],
)
def test_bump_version(version: str, level: str, new: str) -> None:
    assert rel.format_version(rel.bump_version(rel.parse_version(version), level)) == new


@pytest.mark.parametrize(
    ("spec", "version", "wider"),
    [
        (">=0.1,<0.2", "0.1.1", ">=0.1,<0.2"),  # already inside: unchanged
        (">=0.1,<0.2", "0.2.0", ">=0.1,<0.3"),
        (">=0.1,<0.2", "1.0.0", ">=0.1,<2"),
        (">=1.2,<2", "2.0.0", ">=1.2,<3"),
    ],
)
def test_widen_raises_only_the_upper_bound(spec: str, version: str, wider: str) -> None:
    assert rel.widen(spec, rel.parse_version(version)) == wider


def test_widen_refuses_other_forms() -> None:
    with pytest.raises(rel.ReleaseError, match=">=A,<B"):
        rel.widen("==0.1.0", (0, 2, 0))
    with pytest.raises(rel.ReleaseError, match="unsupported"):
        rel.parse_specifier("~=0.1")


# ---- changelogs ------------------------------------------------------------------------


def test_release_changelog_dates_the_unreleased_entries() -> None:
    text = changelog("rayfield-core", "- Faster puts.\n- A fix.")
    out = rel.release_changelog(text, "0.2.0", DATE)
    sections = rel.changelog_sections(out)
    assert [(s.version, s.date) for s in sections] == [
        ("Unreleased", None),
        ("0.2.0", DATE),
        ("0.1.0", "2026-12-02"),
    ]
    assert sections[0].body == ""
    assert sections[1].body == "- Faster puts.\n- A fix."
    assert out.startswith("# Changelog: rayfield-core\n\nIntro.\n\n## [Unreleased]\n\n## [0.2.0]")


@pytest.mark.parametrize("unreleased", ["", "\n\n", "### Added\n\n### Fixed\n"])
def test_release_changelog_refuses_an_empty_release(unreleased: str) -> None:
    with pytest.raises(rel.ReleaseError, match="no entry under"):
        rel.release_changelog(changelog("rayfield-core", unreleased), "0.2.0", DATE)


def test_release_changelog_refuses_a_version_twice() -> None:
    with pytest.raises(rel.ReleaseError, match=r"already has a section for 0\.1\.0"):
        rel.release_changelog(changelog("rayfield-core", "- x"), "0.1.0", DATE)


def test_add_unreleased_line() -> None:
    out = rel.add_unreleased_line(changelog("rayfield-cli", "- One."), "- Two.")
    assert rel.changelog_entry(out, "Unreleased").body == "- One.\n- Two."
    out = rel.add_unreleased_line(changelog("rayfield-cli"), "- Two.")
    assert rel.changelog_entry(out, "Unreleased").body == "- Two."
    assert "Intro.\n\n## [Unreleased]\n\n- Two.\n\n## [0.1.0] - 2026-12-02\n\n- First" in out
    assert rel.changelog_entry(out, "0.1.0").body == "- First release."


# ---- check -------------------------------------------------------------------------------


def test_check_passes_on_a_consistent_repo(repo: Path) -> None:
    assert rel.check(repo) == []


def test_check_finds_a_range_that_excludes_the_sibling(repo: Path) -> None:
    pyproject = repo / "packages" / "store" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.2.0"'))
    (repo / "packages" / "store" / "src" / "rayfield" / "store" / "__init__.py").write_text(
        '__version__ = "0.2.0"\n'
    )
    (repo / "packages" / "store" / "CHANGELOG.md").write_text(
        changelog("rayfield-store", version="0.2.0")
    )
    problems = rel.check(repo)
    assert problems == [
        "rayfield-core (dependencies): rayfield-store>=0.1,<0.2: excludes rayfield-store's "
        "current version 0.2.0 (widen it: tools/release.py bump does)"
    ]
    assert rel.main(["--root", str(repo), "check"]) == 1


def test_check_finds_extras_ranges_and_other_mistakes(repo: Path) -> None:
    tune = repo / "packages" / "tune" / "pyproject.toml"
    tune.write_text(
        tune.read_text()
        .replace('"rayfield-core[dashboard]>=0.1,<0.2"', '"rayfield-core[dashboard]>=0.2,<0.3"')
        .replace('"rayfield-core>=0.1,<0.2"', '"rayfield-core>=0.1"')
    )
    make_package(repo, "sgd", init_version="0.0.9")
    (repo / "packages" / "cli" / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    problems = rel.check(repo)
    assert len(problems) == 4, problems
    assert (
        "rayfield-tune (dependencies): rayfield-core>=0.1: sibling ranges must read" in problems[1]
    )
    assert problems[2].startswith(
        "rayfield-tune (optional-dependencies.test): rayfield-core[dashboard]>=0.2,<0.3: "
        "excludes rayfield-core's current version 0.1.0"
    )
    assert (
        "rayfield-cli: CHANGELOG.md has no dated section '## [0.1.0] - YYYY-MM-DD'" in problems[0]
    )
    assert problems[3].endswith("says __version__ = '0.0.9', pyproject.toml '0.1.0'")


def test_the_repository_itself_is_consistent() -> None:
    assert rel.check(TOOLS.parent) == []


# ---- bump --------------------------------------------------------------------------------


def test_bump_patch_changes_only_the_package(repo: Path) -> None:
    new, changes = rel.bump(repo, "core", "patch", DATE)
    assert new == "0.1.1"
    core = repo / "packages" / "core"
    assert set(changes) == {
        core / "CHANGELOG.md",
        core / "pyproject.toml",
        core / "src" / "rayfield" / "core" / "__init__.py",
    }
    assert 'version = "0.1.1"' in changes[core / "pyproject.toml"]
    assert '__version__ = "0.1.1"' in changes[core / "src" / "rayfield" / "core" / "__init__.py"]
    entry = rel.changelog_entry(changes[core / "CHANGELOG.md"], "0.1.1")
    assert (entry.date, entry.body) == (DATE, "- Faster puts.")


def test_bump_minor_widens_the_siblings_ranges(repo: Path) -> None:
    assert rel.main(["--root", str(repo), "bump", "rayfield-core", "minor", "--date", DATE]) == 0
    cli = (repo / "packages" / "cli" / "pyproject.toml").read_text()
    tune = (repo / "packages" / "tune" / "pyproject.toml").read_text()
    assert '"rayfield-core[dashboard]>=0.1,<0.3"' in cli
    assert '"rayfield-core>=0.1,<0.3"' in tune
    assert '"rayfield-core[dashboard]>=0.1,<0.3"' in tune  # the test extra too
    # core's own ranges on the others are untouched
    core = (repo / "packages" / "core" / "pyproject.toml").read_text()
    assert '"rayfield-store>=0.1,<0.2"' in core and 'version = "0.2.0"' in core
    # the widened packages need a release: said in their Unreleased sections
    cli_log = (repo / "packages" / "cli" / "CHANGELOG.md").read_text()
    assert rel.changelog_entry(cli_log, "Unreleased").body == (
        f"- Dependencies: accepts rayfield-core 0.2.0 (`rayfield-core>=0.1,<0.3`), released {DATE}."
    )
    store_log = (repo / "packages" / "store" / "CHANGELOG.md").read_text()
    assert rel.changelog_entry(store_log, "Unreleased").body == ""
    assert rel.check(repo) == []


def test_bump_refuses_without_a_changelog_entry(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {p: p.read_text() for p in repo.rglob("*") if p.is_file()}
    assert rel.main(["--root", str(repo), "bump", "store", "minor"]) == 1
    assert "no entry under '## [Unreleased]'" in capsys.readouterr().err
    assert {p: p.read_text() for p in repo.rglob("*") if p.is_file()} == before


def test_bump_dry_run_writes_nothing(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p: p.read_text() for p in repo.rglob("*") if p.is_file()}
    assert rel.main(["--root", str(repo), "bump", "core", "major", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would change packages/cli/pyproject.toml" in out
    assert {p: p.read_text() for p in repo.rglob("*") if p.is_file()} == before


def test_bump_unknown_package(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rel.main(["--root", str(repo), "bump", "nope", "patch"]) == 1
    assert "no package 'nope'" in capsys.readouterr().err


# ---- notes -------------------------------------------------------------------------------


def test_notes_lists_files_tags_sizes_and_the_entry(repo: Path) -> None:
    dist = repo / "dist"
    dist.mkdir()
    (dist / "rayfield_store-0.1.0-cp311-abi3-manylinux_2_34_x86_64.whl").write_bytes(b"x" * 2600)
    (dist / "rayfield_store-0.1.0.tar.gz").write_bytes(b"x" * 1200)
    (dist / "rayfield_store-0.0.9.tar.gz").write_bytes(b"old")  # another version: left out
    out = rel.notes(repo, dist)
    store = out.split("=== rayfield-core")[0]
    assert store.startswith("=== rayfield-store 0.1.0\n")
    assert "wheel cp311-abi3-manylinux_2_34_x86_64" in store and "3 kB" in store
    assert "sdist" in store and "0.0.9" not in store
    assert "CHANGELOG.md [0.1.0] - 2026-12-02:\n    - First release." in store
    assert f"(nothing in {dist})" in out.split("=== rayfield-core")[1]
