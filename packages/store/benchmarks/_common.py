"""Shared by the benchmark's sides: parameters, timing statistics, result output.

Every side (``_memcpy_side``, ``_rayfield_side``, ``_ray_side``) is a script
run in its own subprocess by ``bench_store.py``. This module imports nothing
beyond the standard library so that any interpreter (the Ray venv included)
can load it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

MB = 1_000_000
GB = 1_000_000_000
SMALL_DATA = b"01234567"  # the 8-byte payload of the small put/get rows
LARGE_SIZES = {"1MB": 1 * MB, "100MB": 100 * MB}
STORE_BYTES = 1 << 30  # 1 GiB arena for rayfield, object_store_memory for Ray
RESULT_MARKER = "BENCH_RESULT "

_FULL = {
    "repeats": 5,  # timed repeats of each loop; the table pools them
    "small_calls": 5_000,  # small put/get calls in one timed loop
    "small_warmup": 1_000,
    "puts": {"1MB": 400, "100MB": 10},  # puts in one timed loop, per client
    "put_warmup": {"1MB": 50, "100MB": 3},
    "memcpy_copies": {"1MB": 400, "100MB": 20},
}
_QUICK = {
    "repeats": 3,
    "small_calls": 2_000,
    "small_warmup": 300,
    "puts": {"1MB": 150, "100MB": 5},
    "put_warmup": {"1MB": 20, "100MB": 2},
    "memcpy_copies": {"1MB": 150, "100MB": 8},
}


def params(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The run's parameters; ``--quick`` in ``argv`` (default ``sys.argv``) picks the short set."""
    return dict(_QUICK if "--quick" in (sys.argv if argv is None else argv) else _FULL)


def free_every(size_bytes: int) -> int:
    """How many ``size_bytes`` objects a put loop writes before freeing them at once (~16 MB)."""
    return max(1, (16 * MB) // size_bytes)


def rates(work: Sequence[float], seconds: Sequence[float]) -> dict[str, float]:
    """Rates of timed repeats that did ``work[i]`` units (calls, GB) in ``seconds[i]``.

    ``overall`` (all the work over all the time, what the table shows), and the
    ``best``, ``median`` and ``worst`` single repeat.
    """
    per_repeat = [w / s for w, s in zip(work, seconds)]
    return {
        "overall": sum(work) / sum(seconds),
        "best": max(per_repeat),
        "median": statistics.median(per_repeat),
        "worst": min(per_repeat),
        "repeats": len(per_repeat),
    }


def concurrent_rates(work: float, windows: Sequence[Sequence[Sequence[float]]]) -> dict[str, Any]:
    """Rates of repeats in which clients together did ``work`` units, running at once.

    Args:
        work: units (GB) all clients did in one repeat.
        windows: per repeat, the ``(start, end)`` wall-clock times (``time.time()``)
            of each client's timed loop; a repeat lasts from the first start to
            the last end.

    Returns:
        :func:`rates`, plus ``start_skew_s``: the largest gap between the
        clients' starts, which should be small next to the repeat's length.
    """
    seconds = [max(w[1] for w in ws) - min(w[0] for w in ws) for ws in windows]
    skew = max(max(w[0] for w in ws) - min(w[0] for w in ws) for ws in windows)
    return {**rates([work] * len(windows), seconds), "start_skew_s": skew}


def wait_until(wall_time: float) -> None:
    """Sleep until ``time.time()`` reaches ``wall_time``; the start line of concurrent clients."""
    while (left := wall_time - time.time()) > 0:
        time.sleep(min(left, 0.01) if left < 0.05 else left - 0.04)


def emit(result: dict[str, Any]) -> None:
    """Print one side's result as a single marked JSON line for ``bench_store.py`` to pick up."""
    sys.stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()
