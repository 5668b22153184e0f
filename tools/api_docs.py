"""Render the API reference of rayfield's packages to HTML with pdoc (``nox -s docs``).

    python tools/api_docs.py OUT_DIR MODULE [MODULE ...]

Each MODULE is documented with all its public submodules (no ``_``-prefixed part in the
name; pdoc alone lists only those a package's ``__all__`` names). Packages that export
names lazily (a module ``__getattr__``, so that importing them stays cheap) have those
names resolved first, so pdoc documents every name in ``__all__``. Exits non-zero when
a module or an exported name fails to import.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings
from pathlib import Path

import pdoc
import pdoc.render


def resolve_exports(name: str) -> None:
    """Import ``name`` and every name in its ``__all__``, each kept in its namespace.

    Raises:
        ImportError, AttributeError: the module or one of its exports does not import.
    """
    module = importlib.import_module(name)
    for attr in getattr(module, "__all__", []):
        # pdoc reads the module's namespace: keep a lazily exported name there
        setattr(module, attr, getattr(module, attr))


def public_modules(name: str) -> list[str]:
    """``name`` and the names of its public submodules, found on disk (not imported)."""
    module = importlib.import_module(name)
    found = [name]
    if name == "rayfield":  # the core's namespace also holds the other packages
        skip = {f"rayfield.{p}" for p in ("store", "cli", "autoscaler", "tune", "rllib", "sgd")}
    else:
        skip = set()
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=f"{name}."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or any(
            info.name == s or info.name.startswith(s + ".") for s in skip
        ):
            continue
        found.append(info.name)
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    modules = [m for top in argv[1:] for m in public_modules(top)]
    for name in modules:
        resolve_exports(name)
    # pdoc adds a package's submodules itself where its __all__ does not hide them; the
    # explicit list repeats those, which pdoc reports and ignores.
    warnings.filterwarnings("ignore", message=r"The module specification .* has already been")
    pdoc.render.configure(docformat="google")
    pdoc.pdoc(*modules, output_directory=out)
    print(f"API reference of {len(modules)} modules: {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
