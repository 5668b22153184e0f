"""The import-layer check of `nox -s lint`: contracts in `.importlinter`, and no cycle.

The distributions (rayfield-core, rayfield-store, rayfield-cli, the libraries) share the
`rayfield` package from separate folders, which import-linter cannot follow; so this
script copies every package's `src/rayfield` into one tree under a temporary folder and
checks that tree:

1. `lint-imports` with the contracts of `.importlinter` at the repository root (the
   core's layers; no other package imports `rayfield._private`);
2. no import cycle among rayfield-core's modules (strongly connected components of the
   module graph);
3. no module below the public API (`rayfield._private.*`, `rayfield.exceptions`)
   imports the `rayfield` package itself (its `__init__` imports the whole public API).

Imports inside functions and under TYPE_CHECKING count like any other (grimp, which
import-linter uses, reads them all).

    python tools/check_layers.py [--root REPO] [--config FILE]

Exit status 0 when every check passes, 1 otherwise (each failure is printed).
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


def merge_tree(root: Path, dest: Path) -> list[str]:
    """Copy the Python files of every ``packages/*/src/rayfield`` under ``dest/rayfield``
    (rayfield-core's last, so its ``__init__`` is the package's); returns the dotted
    names of rayfield-core's modules."""
    package_dirs = sorted(root.glob("packages/*/src/rayfield"))
    package_dirs.sort(key=lambda p: p.parts[-3] == CORE)
    core_modules: list[str] = []
    for src in package_dirs:
        for path in src.rglob("*.py*"):
            if path.suffix not in (".py", ".pyi") or "protocol/fb" in path.as_posix():
                continue
            rel = path.relative_to(src.parent)
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            if src.parts[-3] == CORE and path.suffix == ".py":
                parts = list(rel.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                core_modules.append(".".join(parts))
    return core_modules


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


def graph_failures(core_modules: list[str]) -> list[str]:
    """Cycles among ``core_modules`` and lower modules importing ``rayfield`` itself, in
    the graph of the tree first on ``sys.path``."""
    import grimp

    graph = grimp.build_graph("rayfield", cache_dir=None)
    core = set(core_modules) & set(graph.modules)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & core for m in core}
    failures = [
        "import cycle among rayfield-core's modules: " + ", ".join(component)
        for component in strongly_connected(sorted(core), edges)
    ]
    for importer in sorted(graph.find_modules_that_directly_import("rayfield")):
        if importer.startswith(LOWER_PREFIXES):
            failures.append(
                f"{importer} imports the `rayfield` package (the public API): import the "
                "module it needs instead (`import rayfield.exceptions as exceptions`)"
            )
    return failures


def check(root: Path, config: Path) -> list[str]:
    """Every failure of the three checks for the repository at ``root`` (empty: passed).

    Must run in a process that has not imported ``rayfield`` (the merged tree is put
    first on ``sys.path``).

    Raises:
        RuntimeError: ``rayfield`` is imported in this process already.
    """
    if "rayfield" in sys.modules:
        raise RuntimeError("check_layers must run in a process without rayfield imported")
    from importlinter.cli import lint_imports

    with tempfile.TemporaryDirectory(prefix="rayfield-layers-") as tmp:
        core_modules = merge_tree(root, Path(tmp))
        sys.path.insert(0, tmp)
        try:
            failures = graph_failures(core_modules)
            status = lint_imports(config_filename=str(config), no_cache=True, no_logo=True)
        finally:
            sys.path.remove(tmp)
    if status != 0:
        failures.insert(0, f"lint-imports: contracts of {config} broken (listed above)")
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
        print("layers: every contract kept, no import cycle among rayfield-core's modules")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
