"""Observation filters: running mean/std normalisation, mergeable across workers.

Each rollout worker updates its own `MeanStdFilter`; the trainer collects the
workers' changes since the last sync (`buffer`), merges them into its copy and
sends the merged filter back. Statistics merge exactly with the parallel form of
Welford's update.

Sources:
    Chan, Golub, LeVeque, "Updating Formulae and a Pairwise Algorithm for Computing
    Sample Variances", Stanford CS report STAN-CS-79-773, 1979 (the pairwise merge).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RunningStat:
    """Count, mean and sum of squared deviations of a stream of arrays.

    Args:
        shape: the shape of one observation.
    """

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.n = 0
        self.mean = np.zeros(shape, dtype=np.float64)
        self.m2 = np.zeros(shape, dtype=np.float64)

    def push_batch(self, x: np.ndarray) -> None:
        """Add the rows of ``x`` (float[B, *shape])."""
        x = np.asarray(x, dtype=np.float64)
        if len(x) == 0:
            return
        other = RunningStat(self.mean.shape)
        other.n = len(x)
        other.mean = x.mean(axis=0)
        other.m2 = ((x - other.mean) ** 2).sum(axis=0)
        self.update(other)

    def push(self, x: np.ndarray) -> None:
        self.push_batch(np.asarray(x)[None])

    def update(self, other: RunningStat) -> None:
        """Merge another stream's statistics into this one."""
        if other.n == 0:
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean = self.mean + delta * other.n / n
        self.m2 = self.m2 + other.m2 + delta**2 * self.n * other.n / n
        self.n = n

    @property
    def var(self) -> np.ndarray:
        return self.m2 / (self.n - 1) if self.n > 1 else np.square(self.mean)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    def copy(self) -> RunningStat:
        out = RunningStat(self.mean.shape)
        out.n, out.mean, out.m2 = self.n, self.mean.copy(), self.m2.copy()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean.tolist(), "m2": self.m2.tolist()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunningStat:
        out = cls()
        out.n, out.mean, out.m2 = int(d["n"]), np.asarray(d["mean"]), np.asarray(d["m2"])
        return out


class NoFilter:
    """The identity filter."""

    def __call__(self, x: np.ndarray, update: bool = True) -> np.ndarray:
        return np.asarray(x)

    def apply_changes(self, other: Any, with_buffer: bool = False) -> None:
        pass

    def copy(self) -> NoFilter:
        return self

    def sync(self, other: Any) -> None:
        pass

    def clear_buffer(self) -> None:
        pass

    def as_serializable(self) -> NoFilter:
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"type": "NoFilter"}


class MeanStdFilter:
    """Normalise each element by its running mean and standard deviation.

    ``y = clip((x - mean) / (std + 1e-8), -clip, clip)``.

    Args:
        shape: shape of one observation.
        demean: subtract the running mean.
        destd: divide by the running standard deviation.
        clip: clip the result to ``[-clip, clip]``; None for no clipping.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        demean: bool = True,
        destd: bool = True,
        clip: float | None = 10.0,
    ) -> None:
        self.shape = tuple(shape)
        self.demean, self.destd, self.clip = demean, destd, clip
        self.rs = RunningStat(self.shape)
        self.buffer = RunningStat(self.shape)  # changes since the last sync

    def __call__(self, x: np.ndarray, update: bool = True) -> np.ndarray:
        """Filter one observation (shape) or a batch (B, *shape), updating the stats
        with it when `update`."""
        x = np.asarray(x, dtype=np.float64)
        batched = x.ndim > len(self.shape)
        if update:
            rows = x if batched else x[None]
            self.rs.push_batch(rows)
            self.buffer.push_batch(rows)
        if self.demean:
            x = x - self.rs.mean
        if self.destd:
            x = x / (self.rs.std + 1e-8)
        if self.clip is not None:
            x = np.clip(x, -self.clip, self.clip)
        return x.astype(np.float32)

    def apply_changes(self, other: MeanStdFilter, with_buffer: bool = False) -> None:
        """Merge `other`'s buffered changes into these statistics."""
        self.rs.update(other.buffer)
        if with_buffer:
            self.buffer = other.buffer.copy()

    def copy(self) -> MeanStdFilter:
        out = MeanStdFilter(self.shape, self.demean, self.destd, self.clip)
        out.sync(self)
        return out

    def sync(self, other: MeanStdFilter) -> None:
        """Take `other`'s statistics and buffer."""
        self.rs, self.buffer = other.rs.copy(), other.buffer.copy()

    def clear_buffer(self) -> None:
        self.buffer = RunningStat(self.shape)

    def as_serializable(self) -> MeanStdFilter:
        return self.copy()

    def to_dict(self) -> dict[str, Any]:
        return {"type": "MeanStdFilter", "shape": list(self.shape), "rs": self.rs.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MeanStdFilter:
        out = cls(tuple(d["shape"]))
        out.rs = RunningStat.from_dict(d["rs"])
        return out


def get_filter(name: str, shape: tuple[int, ...]) -> NoFilter | MeanStdFilter:
    """The filter named by the ``observation_filter`` config key.

    Raises:
        ValueError: the name is neither ``"NoFilter"`` nor ``"MeanStdFilter"``.
    """
    if name == "NoFilter":
        return NoFilter()
    if name == "MeanStdFilter":
        return MeanStdFilter(shape)
    raise ValueError(f"unknown observation_filter {name!r}: use 'NoFilter' or 'MeanStdFilter'")


def filter_from_dict(d: dict[str, Any]) -> NoFilter | MeanStdFilter:
    return MeanStdFilter.from_dict(d) if d.get("type") == "MeanStdFilter" else NoFilter()
