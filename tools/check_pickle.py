"""The pickle check of `nox -s lint`: every pickle call in `packages/*/src` is allow-listed.

Unpickling runs whatever code the data names, so a pickle read from a file another user
could write, or from a directory someone copied in, is a way to run their code as you.
This script lists, with `ast`, every use in `packages/*/src` of

- ``pickle``, ``cloudpickle``, ``_pickle`` and ``dill``: ``load``, ``loads``,
  ``Unpickler`` (unpickling) and ``dump``, ``dumps``, ``Pickler`` (pickling; also
  ``cloudpickle.CloudPickler``);
- ``torch.load``: allowed without an entry when called with ``weights_only=True`` (tensors
  and plain containers only, no code runs);
- ``pandas.read_pickle`` / ``DataFrame.to_pickle`` are not followed (rayfield does not use
  pandas in its sources).

Names are followed through imports (``import pickle as p``, ``from pickle import loads``,
``from cloudpickle import loads as cl``), in calls and in plain references
(``map(pickle.loads, blobs)``). Every other use must match an entry of `ALLOWED`: the
file, the qualified name of the function it is in (``Class.method``, ``outer.inner``,
``<module>``) and the call, with a one-line reason. An entry that matches nothing any
more is reported too, so the list stays exact.

    python tools/check_pickle.py [--root REPO] [--list]

``--list`` prints every use found (allowed or not) as ``file:line: call in function``.
Exit status 0 when every use is allowed and every entry is used, 1 otherwise (each
offender and stale entry printed with what to do).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PICKLE_MODULES = ("pickle", "_pickle", "cloudpickle", "dill")
UNPICKLE = ("load", "loads", "Unpickler")
PICKLE = ("dump", "dumps", "Pickler")
TORCH_LOAD = "torch.load"


class Allowed(NamedTuple):
    """A use of pickle that is allowed: where it is, and why it is safe."""

    file: str  # relative to the repository root, with /
    function: str  # qualified name of the enclosing function, or "<module>"
    call: str  # e.g. "pickle.loads", "cloudpickle.dumps", "torch.load"
    reason: str


class Use(NamedTuple):
    """One use of a pickle function found in a source file."""

    file: str
    line: int
    function: str
    call: str
    problem: str  # why it needs an entry


_RUNTIME = "packages/core/src/rayfield/_private"
_TUNE = "packages/tune/src/rayfield/tune"
_TUNE_WRITE = "tune: a user's object JSON cannot hold, written 0600; read only with trusted=True"
_TUNE_READ = "tune: only when the caller passed trusted=True (the documented opt-in)"

ALLOWED: tuple[Allowed, ...] = (
    # rayfield-core's runtime: task payloads, objects and code move between a driver and
    # the workers of its own cluster as pickles (the node's channels and object store).
    Allowed(
        f"{_RUNTIME}/common/serialization.py",
        "_Pickler",
        "cloudpickle.CloudPickler",
        "core: the object store's pickler (writing objects for this cluster's workers)",
    ),
    Allowed(
        f"{_RUNTIME}/common/serialization.py",
        "_pickle",
        "pickle.dumps",
        "core: pickling objects for this cluster's object store (writing)",
    ),
    Allowed(
        f"{_RUNTIME}/common/serialization.py",
        "serialize",
        "pickle.dumps",
        "core: pickling plain values for this cluster's object store (writing)",
    ),
    Allowed(
        f"{_RUNTIME}/common/serialization.py",
        "serialize_error",
        "pickle.loads",
        "core: loads back the pickle of an exception this process just made, to test it",
    ),
    Allowed(
        f"{_RUNTIME}/common/serialization.py",
        "deserialize",
        "pickle.loads",
        "core: objects from this cluster's object store, pickled by its own processes",
    ),
    Allowed(
        f"{_RUNTIME}/common/code.py",
        "pack",
        "pickle.dumps",
        "core: packing a function or class for this cluster's workers (writing)",
    ),
    Allowed(
        f"{_RUNTIME}/common/code.py",
        "pack",
        "cloudpickle.dumps",
        "core: packing a function or class for this cluster's workers (writing)",
    ),
    Allowed(
        f"{_RUNTIME}/common/code.py",
        "unpack",
        "pickle.loads",
        "core: a worker loads the code a driver of its cluster exported",
    ),
    Allowed(
        f"{_RUNTIME}/common/code.py",
        "unpack",
        "cloudpickle.loads",
        "core: a worker loads the code a driver of its cluster exported",
    ),
    Allowed(
        f"{_RUNTIME}/common/task_retry.py",
        "pack",
        "cloudpickle.dumps",
        "core: a task's retry_exceptions classes for its payload (writing)",
    ),
    Allowed(
        f"{_RUNTIME}/common/task_retry.py",
        "unpack",
        "cloudpickle.loads",
        "core: a worker loads the retry_exceptions its driver put in the task's payload",
    ),
    Allowed(
        f"{_RUNTIME}/runtime/runtime.py",
        "StoreRuntime.submit_serialized",
        "pickle.dumps",
        "core: a task's payload for the node manager (writing)",
    ),
    # Direct actor calls: frames between a driver and an actor's worker of its cluster,
    # on a connection opened with the secret the worker published behind the cluster token.
    Allowed(
        f"{_RUNTIME}/runtime/direct_wire.py",
        "encode_call",
        "pickle.dumps",
        "core: a direct call's frame for the actor's worker (writing)",
    ),
    Allowed(
        f"{_RUNTIME}/runtime/direct_wire.py",
        "decode_call",
        "pickle.loads",
        "core: a worker reads a call from a caller that sent its actor's secret",
    ),
    Allowed(
        f"{_RUNTIME}/runtime/direct_wire.py",
        "encode_reply",
        "pickle.dumps",
        "core: a direct call's reply for its caller (writing)",
    ),
    Allowed(
        f"{_RUNTIME}/runtime/direct_wire.py",
        "decode_reply",
        "pickle.loads",
        "core: a driver reads the reply of the port its actor's worker published behind "
        "the cluster token (the worker does not yet prove the secret back)",
    ),
    Allowed(
        f"{_RUNTIME}/runtime/worker_main.py",
        "Worker.steps",
        "pickle.loads",
        "core: a worker loads the task payload its node manager handed it",
    ),
    # rayfield-rllib
    # rayfield-tune: a user's objects that JSON cannot hold are pickled (0600); a pickle is
    # read back only through tune/pickles.py, and only when the caller passed trusted=True.
    Allowed(f"{_TUNE}/checkpoint.py", "write_dict", "pickle.dumps", _TUNE_WRITE),
    Allowed(f"{_TUNE}/pickles.py", "dump_data", "pickle.dumps", _TUNE_WRITE),
    Allowed(f"{_TUNE}/logger.py", "JsonLogger.update_config", "pickle.dumps", _TUNE_WRITE),
    Allowed(f"{_TUNE}/logger.py", "JsonLogger.update_config", "cloudpickle.dumps", _TUNE_WRITE),
    Allowed(f"{_TUNE}/pickles.py", "_trusted_loads", "pickle.loads", _TUNE_READ),
)


def _targets() -> dict[str, str]:
    """Dotted name -> the problem of using it without an entry."""
    out = {}
    for module in PICKLE_MODULES:
        for name in UNPICKLE:
            out[f"{module}.{name}"] = "unpickling runs any code the data names"
        for name in PICKLE:
            out[f"{module}.{name}"] = "pickling writes data only unpickling can read back"
    out["cloudpickle.CloudPickler"] = out["cloudpickle.Pickler"]
    out[TORCH_LOAD] = "torch.load without weights_only=True unpickles"
    return out


TARGETS = _targets()


def _import_names(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted name it was imported as, for every import in ``tree``
    (at any depth: an import inside a function binds the same way for this check)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:  # `import a.b` binds `a`
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    """The dotted name an expression such as ``p.loads`` stands for, imports followed;
    None when it does not start with an imported name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


def _weights_only(call: ast.Call) -> bool:
    return any(
        kw.arg == "weights_only" and isinstance(kw.value, ast.Constant) and kw.value.value is True
        for kw in call.keywords
    )


class _Finder(ast.NodeVisitor):
    """Collects the `Use`s of one module, with the qualified name of where each is."""

    def __init__(self, file: str, names: dict[str, str]) -> None:
        self.file = file
        self.names = names
        self.scope: list[str] = []
        self.uses: list[Use] = []
        self._called: set[int] = set()  # ids of call.func nodes already judged

    def _nested(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _nested

    def _add(self, node: ast.AST, call: str, problem: str) -> None:
        where = ".".join(self.scope) or "<module>"
        self.uses.append(Use(self.file, getattr(node, "lineno", 0), where, call, problem))

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func, self.names)
        if name in TARGETS:
            self._called.add(id(node.func))
            if not (name == TORCH_LOAD and _weights_only(node)):
                self._add(node, name, TARGETS[name])
        self.generic_visit(node)

    def _reference(self, node: ast.Attribute | ast.Name) -> None:
        if id(node) not in self._called:
            name = _dotted(node, self.names)
            if name in TARGETS:
                self._add(node, name, TARGETS[name] + " (passed on, not called here)")
                return  # its parts (`pickle` of `pickle.loads`) are not uses
        self.generic_visit(node)

    visit_Attribute = visit_Name = _reference


def find_uses(path: Path, root: Path) -> list[Use]:
    """Every use of a `TARGETS` name in the Python file ``path`` that needs an entry.

    Raises:
        SyntaxError: the file does not parse.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    finder = _Finder(path.relative_to(root).as_posix(), _import_names(tree))
    finder.visit(tree)
    return finder.uses


def source_files(root: Path) -> Iterator[Path]:
    """The Python files under every ``packages/*/src``, sorted."""
    for src in sorted(root.glob("packages/*/src")):
        yield from sorted(src.rglob("*.py"))


def check(uses: Iterable[Use], allowed: Iterable[Allowed]) -> tuple[list[Use], list[Allowed]]:
    """``(offenders, stale)``: the uses no entry allows, and the entries that allow none."""
    allowed = list(allowed)
    keys = {(a.file, a.function, a.call) for a in allowed}
    used: set[tuple[str, str, str]] = set()
    offenders = []
    for use in uses:
        key = (use.file, use.function, use.call)
        if key in keys:
            used.add(key)
        else:
            offenders.append(use)
    stale = [a for a in allowed if (a.file, a.function, a.call) not in used]
    return offenders, stale


def report(offenders: list[Use], stale: list[Allowed]) -> list[str]:
    """The lines to print for ``offenders`` and ``stale`` entries (empty when none)."""
    lines = []
    for use in offenders:
        if use.call == TORCH_LOAD:
            fix = "pass weights_only=True (tensors and plain containers only)"
        elif use.call.rsplit(".", 1)[1] in UNPICKLE:
            fix = (
                "read JSON, or tensors with torch.load(weights_only=True), instead; "
                "unpickle only data that cannot come from another user or a copied file"
            )
        else:
            fix = "write JSON, or tensors with torch.save, instead"
        lines.append(
            f"{use.file}:{use.line}: {use.call} in {use.function}: {use.problem}; {fix}, "
            "or add an Allowed(file, function, call, reason) entry to ALLOWED in "
            "tools/check_pickle.py saying why it is safe"
        )
    for entry in stale:
        lines.append(
            f"tools/check_pickle.py: the entry for {entry.call} in {entry.function} of "
            f"{entry.file} matches no use any more: remove it from ALLOWED"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository root")
    parser.add_argument("--list", action="store_true", help="print every use found")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    uses = [use for path in source_files(root) for use in find_uses(path, root)]
    if args.list:
        for use in uses:
            print(f"{use.file}:{use.line}: {use.call} in {use.function}")
    offenders, stale = check(uses, ALLOWED)
    lines = report(offenders, stale)
    for line in lines:
        print(line, file=sys.stderr)
    if lines:
        print(
            f"check_pickle: {len(offenders)} use(s) not allowed, {len(stale)} stale entr(y/ies)",
            file=sys.stderr,
        )
        return 1
    print(f"check_pickle: {len(uses)} allowed use(s) of pickle in packages/*/src")
    return 0


if __name__ == "__main__":
    sys.exit(main())
