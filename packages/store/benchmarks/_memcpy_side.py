"""The memcpy baseline: numpy copies of 1 MB and 100 MB into pre-touched destinations.

Run by ``bench_store.py`` in its own process; prints one result line (``_common.emit``).
The copy is the same ``np.copyto`` that the put loops use to fill an object.
"""

from __future__ import annotations

import time

import numpy as np
from _common import GB, LARGE_SIZES, emit, params, rates


def memcpy_gbps(size_bytes: int, copies: int, repeats: int) -> dict[str, float]:
    """GB/s of ``np.copyto`` between two pre-touched uint8 arrays; ``copies`` per repeat."""
    src = np.random.default_rng(0).integers(0, 256, size_bytes, dtype=np.uint8)
    dst = np.ones(size_bytes, dtype=np.uint8)  # touched: no page faults in the timed copies
    np.copyto(dst, src)
    per_repeat = []
    for _ in range(repeats):
        total = 0.0
        for _ in range(copies):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            total += time.perf_counter() - t0
        per_repeat.append(total)
    return rates([copies * size_bytes / GB] * repeats, per_repeat)


def main() -> None:
    p = params()
    emit(
        {
            f"memcpy_{name}": memcpy_gbps(size, p["memcpy_copies"][name], p["repeats"])
            for name, size in LARGE_SIZES.items()
        }
    )


if __name__ == "__main__":
    main()
