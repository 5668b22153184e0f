"""Ray's object store doing the rayfield rows' operations: the peer of ``_rayfield_side``.

Run by ``bench_store.py`` with ``--ray-python`` (default: the same interpreter) in
its own process; prints one result line (``_common.emit``). If ``import ray``
fails the result is ``{"error": "ray not installed"}``.

One ``ray.init(num_cpus=2, object_store_memory=STORE_BYTES)`` per run. The driver
is the single client; the two concurrent clients are two actors. Small objects
are 8-byte ``bytes``; large ones uint8 numpy arrays (``ray.put`` copies them into
plasma). An object is freed by dropping its ref, which Ray does asynchronously.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from _common import (
    GB,
    LARGE_SIZES,
    SMALL_DATA,
    STORE_BYTES,
    concurrent_rates,
    emit,
    free_every,
    params,
    rates,
    wait_until,
)


def put_loop(
    ray: Any, src: np.ndarray, n: int, warmup: int, start_at: float | None = None
) -> dict[str, Any]:
    """``ray.put`` ``src`` ``warmup + n`` times, dropping refs in ~16 MB batches.

    Returns the summed seconds of the last ``n`` puts and the wall-clock window
    of their loop (ref drops included), for the two-client rows.
    """
    batch = free_every(src.nbytes)
    refs = []
    for _ in range(warmup):
        refs.append(ray.put(src))
        if len(refs) >= batch:
            refs.clear()
    refs.clear()
    if start_at is not None:
        wait_until(start_at)
    started = time.time()
    put_seconds = 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        ref = ray.put(src)
        put_seconds += time.perf_counter() - t0
        refs.append(ref)
        del ref
        if len(refs) >= batch:
            refs.clear()
    refs.clear()
    return {"put_seconds": put_seconds, "window": (started, time.time())}


def small_put_seconds(ray: Any, calls: int) -> float:
    """Seconds for ``calls`` puts of an 8-byte object; refs dropped after the clock stops."""
    refs = []
    t0 = time.perf_counter()
    for _ in range(calls):
        refs.append(ray.put(SMALL_DATA))
    seconds = time.perf_counter() - t0
    del refs
    return seconds


def small_get_seconds(ray: Any, ref: Any, calls: int) -> float:
    """Seconds for ``calls`` gets of one existing 8-byte object."""
    t0 = time.perf_counter()
    for _ in range(calls):
        ray.get(ref)
    return time.perf_counter() - t0


class Putter:
    """One of the two concurrent clients: a Ray actor running :func:`put_loop`."""

    def __init__(self) -> None:
        self.sources: dict[int, np.ndarray] = {}

    def put_loop(self, size: int, n: int, warmup: int, start_at: float) -> dict[str, Any]:
        import ray

        if size not in self.sources:
            rng = np.random.default_rng(1)
            self.sources[size] = rng.integers(0, 256, size, dtype=np.uint8)
        return put_loop(ray, self.sources[size], n, warmup, start_at)


def run(ray: Any, p: dict[str, Any]) -> dict[str, Any]:
    """Every row, one after another, on a fresh ``ray.init``."""
    repeats, calls = p["repeats"], p["small_calls"]
    result: dict[str, Any] = {"version": ray.__version__}

    small_put_seconds(ray, p["small_warmup"])
    result["small_put"] = rates(
        [calls] * repeats, [small_put_seconds(ray, calls) for _ in range(repeats)]
    )
    ref = ray.put(SMALL_DATA)
    small_get_seconds(ray, ref, p["small_warmup"])
    result["small_get"] = rates(
        [calls] * repeats, [small_get_seconds(ray, ref, calls) for _ in range(repeats)]
    )
    del ref

    actor: Any = ray.remote(num_cpus=1)(Putter)
    putters = [actor.remote() for _ in range(2)]

    for name, size in LARGE_SIZES.items():
        n, warmup = p["puts"][name], p["put_warmup"][name]
        gb = n * size / GB
        src = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
        loops = [put_loop(ray, src, n, warmup) for _ in range(repeats)]
        result[f"put_{name}_1c"] = rates([gb] * repeats, [loop["put_seconds"] for loop in loops])
        del src

        windows = []
        for _ in range(repeats):
            ray.get([a.put_loop.remote(size, 0, warmup, 0.0) for a in putters])  # warm-up
            start_at = time.time() + 0.2
            loops = ray.get([a.put_loop.remote(size, n, 0, start_at) for a in putters])
            windows.append([loop["window"] for loop in loops])
        result[f"put_{name}_2c"] = concurrent_rates(2 * gb, windows)
    return result


def main() -> None:
    try:
        import ray
    except ImportError:
        emit({"error": "ray not installed"})
        return
    ray.init(
        address="local",  # a fresh instance of our own, even if another one is running here
        num_cpus=2,
        object_store_memory=STORE_BYTES,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        # The actors import _common from this directory.
        runtime_env={"env_vars": {"PYTHONPATH": os.path.dirname(os.path.abspath(__file__))}},
    )
    try:
        emit(run(ray, params()))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
