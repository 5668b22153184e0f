"""Versions, sibling ranges and changelogs of the seven rayfield packages.

    python3 tools/release.py check
        Fails (exit 1) when a package requires a sibling with a range that excludes the
        sibling's current version, when a sibling range is not of the ``>=A,<B`` form,
        when a ``__version__`` disagrees with pyproject.toml, or when a package's
        CHANGELOG.md has no dated section for its current version. ``nox -s lint`` runs it.

    python3 tools/release.py bump PACKAGE LEVEL [--date YYYY-MM-DD] [--dry-run]
        LEVEL is major, minor or patch. Refuses when the package's CHANGELOG.md has
        nothing under ``## [Unreleased]``. Otherwise: the new version in pyproject.toml
        (and ``__version__``), the Unreleased entries become ``## [NEW] - DATE`` under a
        fresh empty ``## [Unreleased]``, and every sibling range on the package that would
        exclude the new version is widened (``>=0.1,<0.2`` -> ``>=0.1,<0.3`` for 0.2.0),
        with a line in that sibling's Unreleased section, since it needs a release too.

    python3 tools/release.py notes [--dist DIR]
        Per package: the version, its files in DIR (wheel tags, sizes) and the changelog
        entry that ships. ``nox -s release`` prints it.

Standard library only (tomllib or tomli to read pyproject.toml): versions are plain
``X.Y.Z`` release numbers, the only kind these packages use.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# Dependency order, as noxfile.PACKAGE_ORDER.
PACKAGE_ORDER = ["store", "core", "cli", "autoscaler", "tune", "rllib", "sgd"]
LEVELS = ("major", "minor", "patch")
UNRELEASED = "Unreleased"

Version = tuple[int, ...]


class ReleaseError(Exception):
    """A refusal: the message says what to fix."""


# ---- versions and ranges -----------------------------------------------------------------


def parse_version(text: str) -> Version:
    if not re.fullmatch(r"\d+(\.\d+)*", text.strip()):
        raise ReleaseError(f"not a plain release version: {text!r}")
    return tuple(int(p) for p in text.strip().split("."))


def format_version(v: Version) -> str:
    return ".".join(str(p) for p in v)


def _cmp(a: Version, b: Version) -> int:
    n = max(len(a), len(b))
    a = a + (0,) * (n - len(a))
    b = b + (0,) * (n - len(b))
    return (a > b) - (a < b)


_OPS = {
    ">=": lambda c: c >= 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    "<": lambda c: c < 0,
    "==": lambda c: c == 0,
    "!=": lambda c: c != 0,
}


def parse_specifier(spec: str) -> list[tuple[str, Version]]:
    """``">=0.1,<0.2"`` -> ``[(">=", (0, 1)), ("<", (0, 2))]``."""
    clauses = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(>=|<=|==|!=|>|<)\s*([\d.]+)\s*", part)
        if m is None:
            raise ReleaseError(f"unsupported version specifier {spec!r}")
        clauses.append((m.group(1), parse_version(m.group(2))))
    return clauses


def spec_contains(spec: str, version: Version) -> bool:
    return all(_OPS[op](_cmp(version, bound)) for op, bound in parse_specifier(spec))


def bump_version(v: Version, level: str) -> Version:
    major, minor, patch = (*v, 0, 0, 0)[:3]
    if level == "major":
        return (major + 1, 0, 0)
    if level == "minor":
        return (major, minor + 1, 0)
    if level == "patch":
        return (major, minor, patch + 1)
    raise ReleaseError(f"LEVEL must be one of {', '.join(LEVELS)}, not {level!r}")


def compatible_upper(v: Version) -> Version:
    """The exclusive upper bound of the releases compatible with ``v``: the next minor
    for 0.x (0.2.1 -> 0.3), the next major after (1.4.0 -> 2)."""
    major, minor = (*v, 0, 0)[:2]
    return (0, minor + 1) if major == 0 else (major + 1,)


def widen(spec: str, version: Version) -> str:
    """``spec`` (``>=A,<B``) with its upper bound raised to admit ``version``; unchanged
    when it already does."""
    if spec_contains(spec, version):
        return spec
    clauses = parse_specifier(spec)
    lower = [(op, b) for op, b in clauses if op in (">=", ">")]
    if len(clauses) != 2 or len(lower) != 1 or not any(op == "<" for op, _ in clauses):
        raise ReleaseError(f"cannot widen {spec!r}: sibling ranges must read '>=A,<B'")
    if not _OPS[lower[0][0]](_cmp(version, lower[0][1])):
        raise ReleaseError(f"{format_version(version)} is below the range {spec!r}")
    op, low = lower[0]
    return f"{op}{format_version(low)},<{format_version(compatible_upper(version))}"


# ---- packages ----------------------------------------------------------------------------


# A quoted requirement on a sibling: "rayfield-core[dashboard]>=0.1,<0.2".
_SIBLING_REQ = re.compile(r'"(?P<name>rayfield-[a-z]+)(?P<extras>\[[^\]]*\])?(?P<spec>[^";]*)"')


@dataclass
class Requirement:
    package: str  # the package that declares it
    where: str  # "dependencies" or "optional-dependencies.NAME"
    name: str  # rayfield-core
    extras: str
    spec: str


@dataclass
class Package:
    key: str  # "core"
    path: Path
    name: str = ""
    version: Version = ()
    requirements: list[Requirement] = field(default_factory=list)

    @property
    def pyproject(self) -> Path:
        return self.path / "pyproject.toml"

    @property
    def changelog(self) -> Path:
        return self.path / "CHANGELOG.md"

    def version_files(self) -> list[Path]:
        """The src files that hold a ``__version__ = "..."`` line."""
        found = []
        for init in sorted((self.path / "src").rglob("__init__.py")):
            if re.search(r'^__version__ = "[^"]*"', init.read_text(), re.M):
                found.append(init)
        return found


def load_packages(root: Path = ROOT) -> dict[str, Package]:
    packages: dict[str, Package] = {}
    for key in PACKAGE_ORDER:
        path = root / "packages" / key
        if not (path / "pyproject.toml").exists():
            continue
        data = tomllib.loads((path / "pyproject.toml").read_text())
        project = data["project"]
        pkg = Package(key, path, project["name"], parse_version(project["version"]))
        groups = [("dependencies", project.get("dependencies", []))]
        for extra, reqs in project.get("optional-dependencies", {}).items():
            groups.append((f"optional-dependencies.{extra}", reqs))
        for where, reqs in groups:
            for req in reqs:
                m = _SIBLING_REQ.fullmatch(f'"{req}"')
                if m:
                    pkg.requirements.append(
                        Requirement(key, where, m["name"], m["extras"] or "", m["spec"].strip())
                    )
        packages[key] = pkg
    return packages


def by_name(packages: dict[str, Package]) -> dict[str, Package]:
    return {p.name: p for p in packages.values()}


# ---- changelogs (Keep a Changelog) ---------------------------------------------------------

# "## [0.1.0] - 2026-12-02" or "## [Unreleased]"
_SECTION = re.compile(
    r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?[ \t]*$", re.M
)


@dataclass
class Section:
    version: str
    date: str | None
    start: int  # offset of the heading
    body_start: int
    end: int
    body: str


def changelog_sections(text: str) -> list[Section]:
    heads = list(_SECTION.finditer(text))
    sections = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[m.end() : end].strip("\n")
        sections.append(Section(m["version"], m["date"], m.start(), m.end(), end, body))
    return sections


def changelog_entry(text: str, version: str) -> Section | None:
    for s in changelog_sections(text):
        if s.version == version:
            return s
    return None


def has_entries(body: str) -> bool:
    """True when a section says something (a list item or a paragraph, not only
    ``###`` headings or blank lines)."""
    return any(line.strip() and not line.startswith("#") for line in body.splitlines())


def release_changelog(text: str, version: str, date: str) -> str:
    """The Unreleased entries become ``## [version] - date`` under a new, empty
    ``## [Unreleased]``. Refuses when Unreleased is missing or says nothing."""
    unreleased = changelog_entry(text, UNRELEASED)
    if unreleased is None:
        raise ReleaseError("the changelog has no '## [Unreleased]' section")
    if not has_entries(unreleased.body):
        raise ReleaseError(
            "the changelog has no entry under '## [Unreleased]': say what this release "
            "changes before releasing it"
        )
    if changelog_entry(text, version) is not None:
        raise ReleaseError(f"the changelog already has a section for {version}")
    new = f"## [{UNRELEASED}]\n\n## [{version}] - {date}\n\n{unreleased.body}\n\n"
    return text[: unreleased.start] + new + text[unreleased.end :].lstrip("\n")


def add_unreleased_line(text: str, line: str) -> str:
    """``line`` appended to the Unreleased section (made when missing)."""
    unreleased = changelog_entry(text, UNRELEASED)
    if unreleased is None:
        first = _SECTION.search(text)
        at = first.start() if first else len(text)
        return text[:at] + f"## [{UNRELEASED}]\n\n{line}\n\n" + text[at:]
    body = unreleased.body
    new_body = f"{body}\n{line}" if body else line
    return (
        text[: unreleased.body_start] + f"\n\n{new_body}\n\n" + text[unreleased.end :].lstrip("\n")
    )


# ---- check -------------------------------------------------------------------------------


def check(root: Path = ROOT) -> list[str]:
    """Every inconsistency found, one line each; empty when all is well."""
    packages = load_packages(root)
    names = by_name(packages)
    problems = []
    for pkg in packages.values():
        for req in pkg.requirements:
            target = names.get(req.name)
            where = f"{pkg.name} ({req.where}): {req.name}{req.extras}{req.spec}"
            if target is None:
                problems.append(f"{where}: no such package in packages/")
                continue
            try:
                clauses = parse_specifier(req.spec) if req.spec else []
            except ReleaseError as exc:
                problems.append(f"{where}: {exc}")
                continue
            ops = sorted(op for op, _ in clauses)
            if ops != ["<", ">="]:
                problems.append(f"{where}: sibling ranges must read '>=A,<B'")
            elif not spec_contains(req.spec, target.version):
                problems.append(
                    f"{where}: excludes {req.name}'s current version "
                    f"{format_version(target.version)} (widen it: tools/release.py bump does)"
                )
        for init in pkg.version_files():
            m = re.search(r'^__version__ = "([^"]*)"', init.read_text(), re.M)
            assert m is not None
            if m.group(1) != format_version(pkg.version):
                rel = init.relative_to(root)
                problems.append(
                    f"{pkg.name}: {rel} says __version__ = {m.group(1)!r}, "
                    f"pyproject.toml {format_version(pkg.version)!r}"
                )
        if not pkg.changelog.exists():
            problems.append(f"{pkg.name}: no CHANGELOG.md")
            continue
        text = pkg.changelog.read_text()
        entry = changelog_entry(text, format_version(pkg.version))
        if changelog_entry(text, UNRELEASED) is None:
            problems.append(f"{pkg.name}: CHANGELOG.md has no '## [{UNRELEASED}]' section")
        if entry is None or entry.date is None:
            problems.append(
                f"{pkg.name}: CHANGELOG.md has no dated section "
                f"'## [{format_version(pkg.version)}] - YYYY-MM-DD' for its version"
            )
    return problems


# ---- bump --------------------------------------------------------------------------------


def _set_version_line(text: str, pattern: str, new: str, what: Path) -> str:
    result, n = re.subn(
        pattern, lambda m: f"{m.group(1)}{new}{m.group(2)}", text, count=1, flags=re.M
    )
    if n != 1:
        raise ReleaseError(f"{what}: no version line to change")
    return result


def bump(root: Path, key: str, level: str, date: str) -> tuple[str, dict[Path, str]]:
    """The new version and the new text of every file it changes (nothing written)."""
    packages = load_packages(root)
    if key not in packages:
        known = ", ".join(packages) or "none"
        raise ReleaseError(f"no package {key!r} (packages: {known})")
    pkg = packages[key]
    new = bump_version(pkg.version, level)
    new_s = format_version(new)
    changes: dict[Path, str] = {}

    def text_of(path: Path) -> str:
        return changes.get(path, path.read_text())

    if not pkg.changelog.exists():
        raise ReleaseError(f"{pkg.name}: no CHANGELOG.md")
    changes[pkg.changelog] = release_changelog(text_of(pkg.changelog), new_s, date)
    changes[pkg.pyproject] = _set_version_line(
        text_of(pkg.pyproject), r'^(version = ")[^"]*(")', new_s, pkg.pyproject
    )
    for init in pkg.version_files():
        changes[init] = _set_version_line(text_of(init), r'^(__version__ = ")[^"]*(")', new_s, init)
    widened: list[str] = []

    def replace(m: re.Match[str]) -> str:
        if m["name"] != pkg.name or not m["spec"].strip():
            return m.group(0)
        spec = m["spec"].strip()
        wider = widen(spec, new)
        if wider != spec:
            widened.append(f"{m['name']}{wider}")
        return f'"{m["name"]}{m["extras"] or ""}{wider}"'

    for other in packages.values():
        widened.clear()
        text = _SIBLING_REQ.sub(replace, text_of(other.pyproject))
        if widened:
            changes[other.pyproject] = text
            if other.key != key and other.changelog.exists():
                line = (
                    f"- Dependencies: accepts {pkg.name} {new_s} "
                    f"(`{sorted(set(widened))[0]}`), released {date}."
                )
                changes[other.changelog] = add_unreleased_line(text_of(other.changelog), line)
    return new_s, changes


# ---- notes -------------------------------------------------------------------------------


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def dist_files(dist: Path, pkg: Package) -> list[Path]:
    stem = pkg.name.replace("-", "_") + "-" + format_version(pkg.version)
    return sorted(p for p in dist.glob(stem + "*") if p.name.endswith((".whl", ".tar.gz")))


def wheel_tags(path: Path) -> str:
    """``rayfield_store-0.1.0-cp311-abi3-manylinux_2_34_x86_64.whl`` -> ``cp311-abi3-...``"""
    return "-".join(path.name[: -len(".whl")].split("-")[2:])


def notes(root: Path, dist: Path) -> str:
    out = []
    for pkg in load_packages(root).values():
        version = format_version(pkg.version)
        out.append(f"=== {pkg.name} {version}")
        files = dist_files(dist, pkg)
        if not files:
            out.append(f"  (nothing in {dist})")
        for f in files:
            kind = f"wheel {wheel_tags(f)}" if f.name.endswith(".whl") else "sdist"
            out.append(f"  {kind:<52} {_size(f.stat().st_size):>9}  {f.name}")
        entry = (
            changelog_entry(pkg.changelog.read_text(), version) if pkg.changelog.exists() else None
        )
        if entry is None:
            out.append(f"  CHANGELOG.md: no entry for {version}")
        else:
            out.append(f"  CHANGELOG.md [{version}] - {entry.date or 'undated'}:")
            out.extend(f"    {line}" if line else "" for line in entry.body.splitlines())
        out.append("")
    return "\n".join(out)


# ---- command line ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/release.py", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="versions, sibling ranges and changelogs agree")
    b = sub.add_parser("bump", help="release one package's Unreleased changelog entries")
    b.add_argument("package", help="store, core, cli, autoscaler, tune, rllib or sgd")
    b.add_argument("level", choices=LEVELS)
    b.add_argument("--date", default=_dt.date.today().isoformat(), help="default: today")
    b.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    n = sub.add_parser("notes", help="release notes of what is in dist/")
    n.add_argument("--dist", type=Path, default=ROOT / "dist")
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        if args.command == "check":
            problems = check(root)
            for p in problems:
                print(f"release check: {p}", file=sys.stderr)
            if not problems:
                print("release check: versions, sibling ranges and changelogs agree")
            return 1 if problems else 0
        if args.command == "bump":
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
                raise ReleaseError(f"--date must read YYYY-MM-DD, not {args.date!r}")
            key = args.package.removeprefix("rayfield-")
            new, changes = bump(root, key, args.level, args.date)
            for path, text in changes.items():
                print(f"{'would change' if args.dry_run else 'changed'} {path.relative_to(root)}")
                if not args.dry_run:
                    path.write_text(text)
            print(f"rayfield-{key} {new}: commit, then `python3 tools/nox.py -s release`")
            return 0
        print(notes(root, args.dist))
        return 0
    except ReleaseError as exc:
        print(f"tools/release.py: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
