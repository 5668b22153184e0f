"""`SyncBatchReplayOptimizer`: whole sampled batches kept in a replay buffer, random
batches of them replayed for learning (MARWIL, BC)."""

from __future__ import annotations

import collections
import random
from typing import TYPE_CHECKING, Any

from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer
from rayfield.rllib.policy.sample_batch import SampleBatch

if TYPE_CHECKING:
    from rayfield.rllib.evaluation.worker_set import WorkerSet


class SyncBatchReplayOptimizer(PolicyOptimizer):
    """Each step takes one batch from every rollout worker (the local one when there
    are none) into a buffer of batches holding at most `buffer_size` rows (the oldest
    batches leave first). Once `learning_starts` env steps have been sampled, batches
    drawn uniformly from the buffer (with replacement) are joined until they hold
    `train_batch_size` rows, and the local worker learns on them once; the new weights
    then go to the remote workers. RLlib 0.7's execution of MARWIL.

    Args:
        workers: the `WorkerSet`.
        learning_starts: env steps to sample before the first learning step (>= 0).
        buffer_size: rows the buffer keeps (>= 1).
        train_batch_size: rows per learning step (>= 1).
        seed: seed of the replay draws.

    Raises:
        ValueError: a size out of range.
    """

    def __init__(
        self,
        workers: WorkerSet,
        learning_starts: int = 0,
        buffer_size: int = 100000,
        train_batch_size: int = 2000,
        seed: int | None = None,
    ) -> None:
        super().__init__(workers)
        if int(buffer_size) < 1 or int(train_batch_size) < 1 or int(learning_starts) < 0:
            raise ValueError(
                "buffer_size and train_batch_size must be >= 1 and learning_starts >= 0, got "
                f"{buffer_size}, {train_batch_size}, {learning_starts}"
            )
        self.learning_starts = int(learning_starts)
        self.buffer_size = int(buffer_size)
        self.train_batch_size = int(train_batch_size)
        self.config = {
            "learning_starts": self.learning_starts,
            "buffer_size": self.buffer_size,
            "train_batch_size": self.train_batch_size,
            "seed": seed,
        }
        self.replay_buffer: collections.deque[Any] = collections.deque()
        self.buffer_rows = 0
        self._rng = random.Random(seed)

    def step(self) -> dict[str, Any]:
        """Sample into the buffer, then one learning step; returns ``{policy_id:
        stats}`` (``{}`` before `learning_starts`)."""
        batches, metrics = self.workers.sample()
        self.episodes.extend(metrics)
        for b in batches:
            self.replay_buffer.append(b)
            self.buffer_rows += b.count
            self.num_steps_sampled += b.count
        while self.buffer_rows > self.buffer_size and len(self.replay_buffer) > 1:
            self.buffer_rows -= self.replay_buffer.popleft().count
        if self.num_steps_sampled < self.learning_starts or not self.replay_buffer:
            return {}
        picked, rows = [], 0
        while rows < self.train_batch_size:
            b = self.replay_buffer[self._rng.randrange(len(self.replay_buffer))]
            picked.append(b)
            rows += b.count
        train_batch = SampleBatch.concat_samples(picked)
        stats = self.workers.local_worker().learn_on_batch(train_batch)
        self.num_steps_trained += train_batch.count
        self.workers.sync_weights({"timestep": self.num_steps_sampled})
        return stats
