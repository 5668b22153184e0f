"""Replay buffers: a columnar ring buffer and its prioritized variant.

Rows are stored column by column in preallocated numpy arrays, so adding a batch
and drawing a minibatch are a few vectorised copies.

Sources:
    Mnih et al., "Human-level control through deep reinforcement learning",
    Nature 518, 2015 (experience replay).
    Schaul, Quan, Antonoglou, Silver, "Prioritized Experience Replay", ICLR 2016
    (proportional prioritisation, importance-sampling weights with exponent beta).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayfield.rllib.execution.segment_tree import MinSegmentTree, SumSegmentTree
from rayfield.rllib.policy.sample_batch import SampleBatch


class ReplayBuffer:
    """A ring buffer of `SampleBatch` rows; the oldest rows are overwritten first.

    Args:
        capacity: maximum number of rows (> 0).
        seed: seed of the sampling generator.

    Raises:
        ValueError: `capacity` < 1.
    """

    def __init__(self, capacity: int, seed: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._cols: dict[str, np.ndarray] = {}
        self._next = 0
        self._size = 0
        self.rng = np.random.default_rng(seed)
        self.num_added = 0

    def __len__(self) -> int:
        return self._size

    def add_batch(self, batch: SampleBatch) -> np.ndarray:
        """Append the rows of `batch` (object columns such as infos are dropped);
        returns the slots they went to."""
        n = batch.count
        if not self._cols:
            for k, v in batch.items():
                if v.dtype != object:
                    self._cols[k] = np.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype)
        idx = (self._next + np.arange(n)) % self.capacity
        for k, col in self._cols.items():
            col[idx] = batch[k]
        self._next = int((self._next + n) % self.capacity)
        self._size = min(self.capacity, self._size + n)
        self.num_added += n
        return idx

    def _gather(self, idx: np.ndarray) -> SampleBatch:
        return SampleBatch({k: v[idx] for k, v in self._cols.items()})

    def sample(self, num_items: int, **kwargs: Any) -> SampleBatch:
        """`num_items` rows drawn uniformly with replacement.

        Raises:
            ValueError: the buffer is empty.
        """
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self._size, num_items)
        out = self._gather(idx)
        out["batch_indexes"] = idx
        out["weights"] = np.ones(num_items, dtype=np.float32)
        return out


class PrioritizedReplayBuffer(ReplayBuffer):
    """Replay with ``P(i) = p_i^alpha / sum_k p_k^alpha``; new rows get the largest
    priority seen so far.

    Args:
        capacity: maximum number of rows.
        alpha: how much prioritisation is used (0 = uniform), >= 0.
        seed: seed of the sampling generator.

    Raises:
        ValueError: `alpha` < 0.
    """

    def __init__(self, capacity: int, alpha: float = 0.6, seed: int | None = None) -> None:
        super().__init__(capacity, seed)
        if alpha < 0:
            raise ValueError(f"prioritized_replay_alpha must be >= 0, got {alpha}")
        self.alpha = alpha
        tree_cap = 1
        while tree_cap < capacity:
            tree_cap *= 2
        self._sum = SumSegmentTree(tree_cap)
        self._min = MinSegmentTree(tree_cap)
        self._max_priority = 1.0

    def add_batch(self, batch: SampleBatch, priorities: np.ndarray | None = None) -> np.ndarray:
        """Append the rows of `batch` with the largest priority seen so far, or with
        `priorities` (``float[batch.count]``, each > 0: e.g. ``|td_error| + eps``
        computed where the rows were sampled, as in Ape-X); returns their slots.

        Raises:
            ValueError: `priorities` of the wrong length or with a value <= 0.
        """
        if priorities is not None:
            priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
            if len(priorities) != batch.count:
                raise ValueError(
                    f"got {len(priorities)} priorities for a batch of {batch.count} rows"
                )
            if np.any(priorities <= 0) or not np.all(np.isfinite(priorities)):
                raise ValueError("priorities must be finite and > 0 (add prioritized_replay_eps)")
        idx = super().add_batch(batch)
        if priorities is None:
            p: Any = self._max_priority**self.alpha
        else:
            p = priorities**self.alpha
            self._max_priority = max(self._max_priority, float(priorities.max()))
        self._sum[idx] = p
        self._min[idx] = p
        return idx

    def sample(self, num_items: int, beta: float = 0.4, **kwargs: Any) -> SampleBatch:
        """Rows drawn by priority, with importance weights ``(N P(i))^-beta``
        normalised by their maximum (column ``weights``) and their slots
        (``batch_indexes``).

        Raises:
            ValueError: the buffer is empty or `beta` <= 0.
        """
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if beta <= 0:
            raise ValueError(f"prioritized_replay_beta must be > 0, got {beta}")
        total = self._sum.sum()
        mass = (self.rng.random(num_items) + np.arange(num_items)) * (total / num_items)
        idx = np.minimum(self._sum.find_prefixsum_idx(mass), self._size - 1)
        p_min = self._min.min() / total
        max_weight = (p_min * self._size) ** (-beta)
        p = self._sum[idx] / total
        weights = (p * self._size) ** (-beta) / max_weight
        out = self._gather(idx)
        out["batch_indexes"] = idx
        out["weights"] = weights.astype(np.float32)
        return out

    def update_priorities(self, idxes: np.ndarray, priorities: np.ndarray) -> None:
        """Set new priorities (e.g. ``|td_error| + eps``) for sampled slots.

        Raises:
            ValueError: a priority <= 0.
        """
        priorities = np.asarray(priorities, dtype=np.float64)
        if np.any(priorities <= 0):
            raise ValueError("priorities must be > 0 (add prioritized_replay_eps)")
        self._sum[idxes] = priorities**self.alpha
        self._min[idxes] = priorities**self.alpha
        self._max_priority = max(self._max_priority, float(priorities.max()))
