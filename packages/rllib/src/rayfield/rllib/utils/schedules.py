"""Piecewise-linear schedules over environment steps (``lr_schedule``...)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence


class PiecewiseSchedule:
    """Linear interpolation between ``(timestep, value)`` points; the first value
    before the first point and the last value after the last.

    Args:
        endpoints: ``[[t0, v0], [t1, v1], ...]`` with increasing ``t``.

    Raises:
        ValueError: no points, or timesteps not increasing.
    """

    def __init__(self, endpoints: Sequence[Sequence[float]]) -> None:
        points = [(float(t), float(v)) for t, v in endpoints]
        if not points:
            raise ValueError("a schedule needs at least one [timestep, value] point")
        if any(b[0] < a[0] for a, b in itertools.pairwise(points)):
            raise ValueError(f"schedule timesteps must increase: {endpoints}")
        self.points = points

    def value(self, t: float) -> float:
        pts = self.points
        if t <= pts[0][0]:
            return pts[0][1]
        for (t0, v0), (t1, v1) in itertools.pairwise(pts):
            if t < t1:
                return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        return pts[-1][1]

    __call__ = value
