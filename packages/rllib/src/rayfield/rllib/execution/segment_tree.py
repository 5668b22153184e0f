"""Sum and min segment trees over a power-of-two array, with batched numpy updates
and prefix-sum search (used by prioritized replay).

Sources:
    Schaul, Quan, Antonoglou, Silver, "Prioritized Experience Replay", ICLR 2016
    (appendix B.2.1: sampling proportionally with a sum tree).
"""

from __future__ import annotations

import numpy as np


class SegmentTree:
    """A complete binary tree stored in an array; leaf ``i`` is at ``capacity + i``.

    Args:
        capacity: number of leaves, a power of two.
        op: ``np.add`` or ``np.minimum``.
        neutral: the operation's neutral element (0 or +inf).

    Raises:
        ValueError: `capacity` is not a positive power of two.
    """

    def __init__(self, capacity: int, op: np.ufunc, neutral: float) -> None:
        if capacity < 1 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a positive power of two, got {capacity}")
        self.capacity = capacity
        self.op = op
        self.tree = np.full(2 * capacity, neutral, dtype=np.float64)

    def __setitem__(self, idx: np.ndarray | int, values: np.ndarray | float) -> None:
        idx = np.atleast_1d(np.asarray(idx, dtype=np.int64)) + self.capacity
        self.tree[idx] = values
        # All leaves sit on one level, so each pass moves every index one level up;
        # a parent listed twice is recomputed twice with the same result.
        while idx[0] > 1:
            idx = idx // 2
            self.tree[idx] = self.op(self.tree[2 * idx], self.tree[2 * idx + 1])

    def __getitem__(self, idx: np.ndarray | int) -> np.ndarray:
        return self.tree[np.asarray(idx) + self.capacity]

    def reduce(self) -> float:
        """The operation over all leaves."""
        return float(self.tree[1])


class SumSegmentTree(SegmentTree):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, np.add, 0.0)

    def sum(self) -> float:
        return self.reduce()

    def find_prefixsum_idx(self, prefixsum: np.ndarray) -> np.ndarray:
        """For each value ``p``, the leaf ``i`` with ``sum(leaves[:i]) <= p <
        sum(leaves[:i+1])`` (batched descent, one numpy step per level)."""
        p = np.asarray(prefixsum, dtype=np.float64).copy()
        idx = np.ones(len(p), dtype=np.int64)
        while idx[0] < self.capacity:
            left = 2 * idx
            go_right = p >= self.tree[left]
            p = np.where(go_right, p - self.tree[left], p)
            idx = np.where(go_right, left + 1, left)
        return idx - self.capacity


class MinSegmentTree(SegmentTree):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, np.minimum, float("inf"))

    def min(self) -> float:
        return self.reduce()
