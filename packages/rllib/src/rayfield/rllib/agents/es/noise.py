"""The pieces of evolution strategies shared by ES and ARS: the shared noise table, the
centered rank transform, and Adam on a flat parameter vector.

Sources:
    Salimans, Ho, Chen, Sidor, Sutskever, "Evolution Strategies as a Scalable
    Alternative to Reinforcement Learning", arXiv:1703.03864, 2017 (section 2.1 the
    shared noise table and antithetic sampling; the appendix / section 2.2 fitness
    shaping with a rank transformation).
    Kingma, Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015 (Algorithm 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Adam", "SharedNoiseTable", "centered_ranks", "create_shared_noise"]


def create_shared_noise(noise_size: int, seed: int = 123) -> Any:
    """Put a table of `noise_size` standard-normal float32 numbers in the object store
    once and return its object ref: every worker passed the ref reads the same copy,
    zero-copy (``rayfield.get`` of a numpy array is a read-only view of the store).

    Raises:
        ValueError: `noise_size` < 1.
    """
    import rayfield

    if noise_size < 1:
        raise ValueError(f"noise_size must be >= 1, got {noise_size}")
    return rayfield.put(make_noise(noise_size, seed))


def make_noise(noise_size: int, seed: int = 123) -> np.ndarray:
    """The table's numbers: float32[noise_size], standard normal, from `seed`."""
    return np.random.default_rng(seed).standard_normal(int(noise_size), dtype=np.float32)


class SharedNoiseTable:
    """Slices of a fixed noise table as perturbations: a perturbation of ``dim``
    parameters is sent as one int (its offset), not ``dim`` floats.

    Args:
        noise: float32[size] (a store view on a worker; only read).
    """

    def __init__(self, noise: np.ndarray) -> None:
        self.noise = noise

    def get(self, index: int, dim: int) -> np.ndarray:
        """``noise[index:index + dim]`` (a view)."""
        return self.noise[index : index + dim]

    def sample_index(self, rng: np.random.Generator, dim: int) -> int:
        """A uniform offset with room for `dim` numbers.

        Raises:
            ValueError: the table is shorter than `dim`.
        """
        if dim > len(self.noise):
            raise ValueError(
                f"noise_size ({len(self.noise)}) must be at least the policy's "
                f"{dim} parameters: raise noise_size"
            )
        return int(rng.integers(0, len(self.noise) - dim + 1))


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """The centered rank transform of fitness values: each value's rank among all of
    `x` scaled to [-0.5, 0.5] (the lowest -0.5, the highest 0.5; ties by position).

    Args:
        x: float[...], any shape (ranked over all elements).

    Returns:
        float64 of `x`'s shape.
    """
    x = np.asarray(x)
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[x.ravel().argsort(kind="stable")] = np.arange(x.size)
    if x.size > 1:
        ranks = ranks / (x.size - 1) - 0.5
    else:
        ranks[:] = 0.0
    return ranks.reshape(x.shape)


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1) ascending a flat parameter vector.

    Args:
        dim: parameters. stepsize: alpha. beta1, beta2, epsilon: as in the paper.
    """

    def __init__(
        self,
        dim: int,
        stepsize: float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
    ) -> None:
        self.stepsize, self.beta1, self.beta2, self.epsilon = stepsize, beta1, beta2, epsilon
        self.m = np.zeros(dim, dtype=np.float64)
        self.v = np.zeros(dim, dtype=np.float64)
        self.t = 0

    def step(self, theta: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """``theta`` moved along the (ascent) gradient; returns the new vector."""
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient**2
        a = self.stepsize * np.sqrt(1 - self.beta2**self.t) / (1 - self.beta1**self.t)
        return theta + a * self.m / (np.sqrt(self.v) + self.epsilon)

    def state(self) -> dict[str, Any]:
        return {"m": self.m.tolist(), "v": self.v.tolist(), "t": self.t}

    def set_state(self, state: dict[str, Any]) -> None:
        self.m = np.asarray(state["m"], dtype=np.float64)
        self.v = np.asarray(state["v"], dtype=np.float64)
        self.t = int(state["t"])
