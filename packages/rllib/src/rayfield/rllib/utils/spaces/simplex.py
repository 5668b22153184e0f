"""`Simplex`: a gymnasium space of probability vectors (non-negative, summing to 1 along
the last axis), e.g. an allocation of a resource among ``k`` uses. Actions in it are
sampled from a `Dirichlet` action distribution (`rayfield.rllib.models.distributions`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Simplex(gym.Space):
    """Vectors ``x`` of `shape` with ``x >= 0`` and ``x.sum(-1) == 1``.

    Args:
        shape: the vectors' shape; its last axis is the simplex's dimension ``k``.
        concentration: float[k], the Dirichlet concentration `sample` draws with
            (default: ones, uniform on the simplex).
        dtype: the values' dtype.
        seed: seed of `sample`.

    Raises:
        ValueError: an empty shape, or a concentration that is not ``k`` positive numbers.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        concentration: Any = None,
        dtype: Any = np.float32,
        seed: int | None = None,
    ) -> None:
        shape = tuple(int(s) for s in shape)
        if not shape or shape[-1] < 1:
            raise ValueError(f"a Simplex needs a shape whose last axis is >= 1, got {shape}")
        self.dim = shape[-1]
        if concentration is None:
            concentration = np.ones(self.dim)
        self.concentration = np.asarray(concentration, dtype=np.float64)
        if self.concentration.shape != (self.dim,) or not (self.concentration > 0).all():
            raise ValueError(
                f"concentration must be {self.dim} positive numbers, got {concentration!r}"
            )
        super().__init__(shape, dtype, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """A draw of ``Dirichlet(concentration)`` of `shape`."""
        assert self.shape is not None
        out = self.np_random.dirichlet(self.concentration, size=self.shape[:-1])
        return out.astype(self.dtype)

    def contains(self, x: Any) -> bool:
        """`x` has `shape`, no negative value and sums to 1 (within 1e-4) on the last axis."""
        x = np.asarray(x)
        return bool(
            x.shape == self.shape and (x >= 0).all() and np.allclose(x.sum(axis=-1), 1.0, atol=1e-4)
        )

    @property
    def is_np_flattenable(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Simplex({self.shape}, concentration={self.concentration.tolist()})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Simplex)
            and self.shape == other.shape
            and np.allclose(self.concentration, other.concentration)
        )
