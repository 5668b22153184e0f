"""Helpers of ``bench_tune.py``: byte-compiling rayfield and the medians and ratios of
repeated runs."""

from __future__ import annotations

from typing import Any

__all__ = ["_compile_rayfield", "_median", "_ratios", "_spread"]


def _compile_rayfield() -> None:
    """Byte-compile rayfield, as ``pip install`` did Optuna and scikit-learn (else, with
    PYTHONDONTWRITEBYTECODE, every process compiles what it imports inside the timer)."""
    import compileall

    import rayfield

    for path in rayfield.__path__:
        compileall.compile_dir(path, quiet=2)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _spread(row: dict[str, Any]) -> str:
    walls = row.get("runs_wall_s")
    if not walls:
        return ""
    low, high = min(walls), max(walls)
    return f"  median of {len(walls)}: {row['median_wall_s']:.2f} s ({low:.2f}-{high:.2f})"


def _ratios(
    runs: dict[str, list[dict[str, Any]]], num: str, den: str, per: str | None = None
) -> str:
    """The median over rounds of ``num``'s wall time over ``den``'s in the same round
    (with ``per``: of the wall time per unit of that field, e.g. per epoch)."""

    def cost(run: dict[str, Any]) -> float:
        return float(run["wall_s"]) / (max(run.get(per, 1), 1) if per else 1)

    pairs = [
        cost(a) / cost(b)
        for a, b in zip(runs.get(num, []), runs.get(den, []), strict=False)
        if "wall_s" in a and "wall_s" in b
    ]
    if len(pairs) < 2:
        return ""
    listed = ", ".join(f"{r:.2f}" for r in pairs)
    what = f"wall time per {per.rstrip('s')}" if per else "wall time"
    return f"{num} / {den} {what}, per round: median {_median(pairs):.2f} ({listed})"
