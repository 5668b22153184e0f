"""One shard of ``DistributedSGD``'s parameter server (``strategy="ps"``).

Kept apart from the workers and importing only numpy, so that a server's process never
imports torch.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["ParameterServer"]


class ParameterServer:
    """One shard of the parameter server: averages the workers' gradient shards."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers

    def get_pid(self) -> int:
        return os.getpid()

    def get_node_id(self) -> str:
        """The id (hex) of the node this shard runs on."""
        import rayfield

        return str(rayfield.get_runtime_context().get_node_id())

    def aggregate(self, *shards: np.ndarray) -> np.ndarray:
        """The mean of one shard over all workers (float32, same length).

        Raises:
            ValueError: not exactly ``num_workers`` shards, or their lengths differ.
        """
        if len(shards) != self.num_workers:
            raise ValueError(f"expected {self.num_workers} gradient shards, got {len(shards)}")
        shape = shards[0].shape
        for shard in shards[1:]:
            if shard.shape != shape:
                raise ValueError(f"gradient shards differ in shape: {shard.shape} vs {shape}")
        if len(shards) == 1:
            total = np.array(shards[0], dtype=np.float32, copy=True)
        else:  # the first sum writes a new array, so the inputs are read only once
            total = np.add(shards[0], shards[1], dtype=np.float32)
            for shard in shards[2:]:
                total += shard
        total /= np.float32(self.num_workers)
        return total
