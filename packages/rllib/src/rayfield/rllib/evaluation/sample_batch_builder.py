"""`SampleBatchBuilder`: build a `SampleBatch` one row at a time (for experience
produced outside RLlib, e.g. to write it with `rayfield.rllib.offline.JsonWriter`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rayfield.rllib.policy.sample_batch import SampleBatch

__all__ = ["SampleBatchBuilder"]


class SampleBatchBuilder:
    """Collects rows with `add_values` and returns them as a batch with
    `build_and_reset`.

    Example:
        builder = SampleBatchBuilder()
        builder.add_values(obs=[0.1, 0.2], actions=1, rewards=1.0, dones=False)
        batch = builder.build_and_reset()   # SampleBatch(1 rows: ...)
    """

    def __init__(self) -> None:
        self.buffers: dict[str, list[Any]] = {}
        self.count = 0

    def add_values(self, **values: Any) -> None:
        """Add one row (every call must give the same columns).

        Raises:
            ValueError: the columns differ from those of the earlier rows.
        """
        if self.count and set(values) != set(self.buffers):
            missing = sorted(set(self.buffers) - set(values))
            extra = sorted(set(values) - set(self.buffers))
            raise ValueError(
                f"row {self.count} has other columns than the rows before it "
                f"(missing {missing}, new {extra})"
            )
        for k, v in values.items():
            self.buffers.setdefault(k, []).append(v)
        self.count += 1

    def add_batch(self, batch: SampleBatch) -> None:
        """Add every row of `batch`."""
        for row in batch.rows():
            self.add_values(**row)

    def build_and_reset(self) -> SampleBatch:
        """The rows added since the last call, as a `SampleBatch`."""
        cols = {}
        for k, v in self.buffers.items():
            if v and isinstance(v[0], dict):
                arr = np.empty(len(v), dtype=object)
                arr[:] = v
                cols[k] = arr
            else:
                cols[k] = np.asarray(v)
        self.buffers, self.count = {}, 0
        return SampleBatch(cols)
