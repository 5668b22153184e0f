"""Cython: compiled functions and a compiled class run as remote tasks and an actor.

Usage (from this folder; the first run compiles, with Cython and the C compiler, ~30 s of CPU)::

    python cython_remote.py --num-workers 2

The ``cython_examples`` package next to this file holds three ``.pyx`` modules: plain Python
compiled as is, typed ``cpdef`` Fibonacci and primes, a compiled class, a numpy array processed
through a typed memoryview with the GIL released, and a Gaussian kernel matrix computed with
BLAS ``dgemm`` from ``scipy.linalg.cython_blas``. :func:`build` compiles them in place
(``build_ext`` into this folder); it does nothing when every extension is newer than its source.

As in the reference, a ``.pyx`` file cannot carry ``@remote``: the driver applies it to the
compiled objects, ``fib = rf.remote(simple.fib)``. A compiled function or class is pickled by
reference (its module and name), so every worker must be able to import the compiled module:
as in Ray, compiling and distributing compiled code is the user's job. Here :func:`load` puts
this folder on the driver's ``sys.path``, and rayfield sends the driver's module search path
with exported code, so workers on this machine, or on nodes sharing this file system
(``run_all.py --address``), import the extensions built here. A task returns its result: it
cannot fill a buffer the caller passed.

Ports the Cython example of Ray's documentation (its ``cython_main.py`` examples); checks every
remote result against numpy, scipy or plain Python, and prints the speed-up of typed code.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from _common import run_standalone

import rayfield as rf

EXAMPLES_DIR = Path(__file__).resolve().parent
PACKAGE = "cython_examples"
MODULES = ("simple", "masked_log", "blas")


def _stale() -> list[str]:
    """The modules whose compiled extension is missing or older than its ``.pyx``."""
    stale = []
    for name in MODULES:
        source = EXAMPLES_DIR / PACKAGE / f"{name}.pyx"
        built = list((EXAMPLES_DIR / PACKAGE).glob(f"{name}.*.so")) + list(
            (EXAMPLES_DIR / PACKAGE).glob(f"{name}.*.pyd")
        )
        if not built or max(p.stat().st_mtime for p in built) < source.stat().st_mtime:
            stale.append(name)
    return stale


def build(force: bool = False) -> list[str]:
    """Compiles the ``.pyx`` modules of ``cython_examples`` in place; returns those compiled.

    Raises:
        RuntimeError: Cython is not installed (``pip install 'rayfield[examples]'``), or the C
            compiler failed (its output is above the error).
    """
    names = list(MODULES) if force else _stale()
    if not names:
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as err:
        raise RuntimeError(
            "the Cython example needs Cython and a C compiler: pip install 'rayfield[examples]'"
        ) from err
    from setuptools import Distribution, Extension

    extensions = [
        Extension(
            f"{PACKAGE}.{name}",
            [str(EXAMPLES_DIR / PACKAGE / f"{name}.pyx")],
            # The hot loops are BLAS and plain C: -O1 compiles ~1.5x faster than -O2.
            extra_compile_args=["-O1"],
        )
        for name in names
    ]
    with tempfile.TemporaryDirectory(prefix="cython-build-") as build_temp:
        try:
            dist = Distribution({"ext_modules": cythonize(extensions, quiet=True)})
            command = dist.get_command_obj("build_ext")
            # The extensions land next to their sources: EXAMPLES_DIR/cython_examples/.
            command.build_lib = str(EXAMPLES_DIR)  # type: ignore[attr-defined]
            command.build_temp = build_temp  # type: ignore[attr-defined]
            # One compiler process per CPU (the modules compile independently).
            command.parallel = os.cpu_count() or 1  # type: ignore[attr-defined]
            dist.run_command("build_ext")
        except Exception as err:
            raise RuntimeError(f"building {PACKAGE} ({', '.join(names)}) failed: {err}") from err
    importlib.invalidate_caches()
    return names


def load() -> dict[str, ModuleType]:
    """Builds if needed, then imports the compiled modules."""
    build()
    if str(EXAMPLES_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLES_DIR))
    return {name: importlib.import_module(f"{PACKAGE}.{name}") for name in MODULES}


def fib_reference(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def primes_reference(count: int) -> list[int]:
    found: list[int] = []
    candidate = 2
    while len(found) < count:
        if all(candidate % p for p in found):
            found.append(candidate)
        candidate += 1
    return found


def main(num_workers: int = 2, fib_n: int = 30, num_primes: int = 3000) -> dict[str, Any]:
    """Runs each compiled function as remote tasks, ``num_workers`` at a time.

    Returns:
        ``greet_ok``, ``fib_ok``, ``primes_ok``, ``masked_log_ok``, ``kernel_max_error``
        (largest deviation from scipy's), ``actor_total``, ``typed_speedup`` (untyped over
        typed Fibonacci time, each a remote task), ``wall_s``, and ``ok``.
    """
    start = time.perf_counter()
    modules = load()
    simple, masked_log, blas = modules["simple"], modules["masked_log"], modules["blas"]

    greet = rf.remote(simple.greet)
    fib = rf.remote(simple.fib)
    fib_objects = rf.remote(simple.fib_python_objects)
    primes = rf.remote(simple.primes)
    remote_masked_log = rf.remote(masked_log.masked_log)
    kernel = rf.remote(blas.gaussian_kernel)

    greetings = rf.get([greet.remote(f"worker {i}") for i in range(num_workers)])
    greet_ok = greetings == [f"hello, worker {i}" for i in range(num_workers)]

    ns = list(range(fib_n - num_workers + 1, fib_n + 1))
    rf.get([f.remote(2) for f in (fib, fib_objects) for _ in ns])  # code loaded on the workers
    t0 = time.perf_counter()
    fibs = rf.get([fib.remote(n) for n in ns])
    typed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fibs_objects = rf.get([fib_objects.remote(n) for n in ns])
    untyped_s = time.perf_counter() - t0
    fib_ok = fibs == fibs_objects == [fib_reference(n) for n in ns]
    print(f"fib{ns} = {fibs}: typed {typed_s:.3f} s, Python objects {untyped_s:.3f} s")

    primes_ok = rf.get(primes.remote(num_primes)) == primes_reference(num_primes)
    print(f"primes({num_primes}) as a remote task equal to trial division in Python: {primes_ok}")

    rng = np.random.default_rng(0)
    chunks = [rng.normal(size=100_000) for _ in range(num_workers)]
    logs = rf.get([remote_masked_log.remote(rf.put(c)) for c in chunks])
    masked_log_ok = all(
        np.allclose(out, np.where(c > 0, np.log(np.where(c > 0, c, 1.0)), 0.0))
        for out, c in zip(logs, chunks, strict=True)
    )
    print(f"masked_log on {num_workers} arrays of 100,000 equal to numpy's: {masked_log_ok}")

    from scipy.spatial.distance import cdist

    points = rng.normal(size=(400, 8))
    blocks = np.array_split(points, num_workers)
    gamma = 0.1
    kernel_rows = rf.get([kernel.remote(block, points, gamma) for block in blocks])
    expected = np.exp(-gamma * cdist(points, points, "sqeuclidean"))
    kernel_max_error = float(np.max(np.abs(np.vstack(kernel_rows) - expected)))
    print(
        f"Gaussian kernel of 400 points, row blocks on {num_workers} tasks (BLAS dgemm): "
        f"max |K - scipy| {kernel_max_error:.1e}"
    )

    accumulator = rf.remote(simple.Accumulator).remote(10)  # type: ignore[attr-defined]
    totals = rf.get([accumulator.add.remote(v) for v in range(1, 5)])
    print(f"compiled Accumulator actor, 10 + 1 + 2 + 3 + 4 step by step: {totals}")
    wall_s = time.perf_counter() - start
    return {
        "greet_ok": greet_ok,
        "fib_ok": fib_ok,
        "primes_ok": primes_ok,
        "masked_log_ok": masked_log_ok,
        "kernel_max_error": kernel_max_error,
        "actor_total": totals[-1],
        "typed_speedup": untyped_s / typed_s,
        "wall_s": wall_s,
        "ok": greet_ok
        and fib_ok
        and primes_ok
        and masked_log_ok
        and kernel_max_error < 1e-9
        and totals == [11, 13, 16, 20],
    }


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
