"""The import-layer check of `nox -s lint`: contracts in `.importlinter`, and no cycle.

The distributions (rayfield-core, rayfield-store, rayfield-cli, the libraries) share the
`rayfield` package from separate folders, which import-linter cannot follow; so this
script copies every package's `src/rayfield` into one tree under a temporary folder and
checks that tree:

1. `lint-imports` with the contracts of `.importlinter` at the repository root (the
   core's layers; no other package imports `rayfield._private`);
2. no import cycle among one package's modules, in every package (strongly connected
   components of the graph of each package's own modules: rayfield-core's, rayfield-tune's,
   ...; an import of another package's module is not an edge of this one's graph);
3. no module below the public API (`rayfield._private.*`, `rayfield.exceptions`)
   imports the `rayfield` package itself (its `__init__` imports the whole public API);
4. no module in `packages/*/src` is over 600 lines (the generated code under
   `protocol/fb` aside).

Imports inside functions and under TYPE_CHECKING count like any other (grimp, which
import-linter uses, reads them all).

    python tools/check_layers.py [--root REPO] [--config FILE]

Exit status 0 when every check passes, 1 otherwise (each failure is printed: a cycle with
the modules in it, a long module with its length).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = "core"
LOWER_PREFIXES = ("rayfield._private", "rayfield.exceptions")
MAX_LINES = 600
GENERATED = "protocol/fb"


def merge_tree(root: Path, dest: Path) -> dict[str, str]:
    """Copy the Python files of every ``packages/*/src/rayfield`` under ``dest/rayfield``
    (rayfield-core's last, so its ``__init__`` is the package's); returns the package
    (the folder's name under ``packages``: ``core``, ``tune``, ...) of each module, by
    dotted name."""
    package_dirs = sorted(root.glob("packages/*/src/rayfield"))
    package_dirs.sort(key=lambda p: p.parts[-3] == CORE)
    packages: dict[str, str] = {}
    for src in package_dirs:
        for path in src.rglob("*.py*"):
            if path.suffix not in (".py", ".pyi") or GENERATED in path.as_posix():
                continue
            rel = path.relative_to(src.parent)
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            if path.suffix == ".py":
                parts = list(rel.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                packages[".".join(parts)] = src.parts[-3]
    return packages


def long_modules(root: Path, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """``(path relative to root, lines)`` of every module in ``packages/*/src`` over
    ``limit`` lines, the generated code under ``protocol/fb`` aside."""
    found = []
    for path in sorted(root.glob("packages/*/src/**/*.py")):
        rel = path.relative_to(root).as_posix()
        if GENERATED in rel:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append((rel, lines))
    return found


def strongly_connected(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm,
    iterative), each sorted.

    Sources: R. Tarjan, "Depth-first search and linear graph algorithms", SIAM J.
    Computing 1(2), 1972.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_cycles(
    packages: dict[str, str], imports: dict[str, set[str]]
) -> list[tuple[str, list[str]]]:
    """``(package, modules)`` of each import cycle among one package's modules:
    ``packages`` maps each module to its package, ``imports`` each module to the modules
    it imports directly (an import of another package's module is no edge)."""
    cycles = []
    for package in sorted(set(packages.values())):
        own = {m for m, p in packages.items() if p == package}
        edges = {m: imports.get(m, set()) & own for m in own}
        cycles += [(package, c) for c in strongly_connected(sorted(own), edges)]
    return cycles


def graph_failures(packages: dict[str, str]) -> list[str]:
    """Cycles among each package's modules and lower modules importing ``rayfield``
    itself, in the graph of the tree first on ``sys.path``."""
    import grimp

    graph = grimp.build_graph("rayfield", cache_dir=None)
    known = {m: p for m, p in packages.items() if m in graph.modules}
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in known}
    failures = [
        f"import cycle among rayfield-{package}'s modules: " + ", ".join(component)
        for package, component in package_cycles(known, imports)
    ]
    for importer in sorted(graph.find_modules_that_directly_import("rayfield")):
        if importer.startswith(LOWER_PREFIXES):
            failures.append(
                f"{importer} imports the `rayfield` package (the public API): import the "
                "module it needs instead (`import rayfield.exceptions as exceptions`)"
            )
    return failures


def check(root: Path, config: Path) -> list[str]:
    """Every failure of the four checks for the repository at ``root`` (empty: passed).

    Must run in a process that has not imported ``rayfield`` (the merged tree is put
    first on ``sys.path``).

    Raises:
        RuntimeError: ``rayfield`` is imported in this process already.
    """
    if "rayfield" in sys.modules:
        raise RuntimeError("check_layers must run in a process without rayfield imported")
    from importlinter.cli import lint_imports

    with tempfile.TemporaryDirectory(prefix="rayfield-layers-") as tmp:
        packages = merge_tree(root, Path(tmp))
        sys.path.insert(0, tmp)
        try:
            failures = graph_failures(packages)
            status = lint_imports(config_filename=str(config), no_cache=True, no_logo=True)
        finally:
            sys.path.remove(tmp)
    if status != 0:
        failures.insert(0, f"lint-imports: contracts of {config} broken (listed above)")
    failures += [
        f"module over {MAX_LINES} lines: {path} ({lines} lines)"
        for path, lines in long_modules(root)
    ]
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository")
    parser.add_argument("--config", type=Path, help="default: ROOT/.importlinter")
    args = parser.parse_args(argv)
    failures = check(args.root.resolve(), (args.config or args.root / ".importlinter").resolve())
    for failure in failures:
        print("FAIL:", failure)
    if not failures:
        print(
            "layers: every contract kept, no import cycle in any package, "
            f"no module over {MAX_LINES} lines"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
