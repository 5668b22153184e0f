"""`SyncSamplesOptimizer`: synchronous sampling, learning on the local worker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer
from rayfield.rllib.policy.sample_batch import SampleBatch

if TYPE_CHECKING:
    from rayfield.rllib.evaluation.worker_set import WorkerSet


class SyncSamplesOptimizer(PolicyOptimizer):
    """Sync samples: each step gathers batches from all rollout workers (the local one
    when there are no remote ones) until at least `train_batch_size` env steps, runs
    the local worker's ``learn_on_batch`` on their concatenation `num_sgd_iter` times,
    then sends the new weights to the remote workers (with ``{"timestep":
    num_steps_sampled}``). Used by PG, A2C and PPO (PPO's policy runs its own
    ``num_sgd_iter`` minibatch epochs inside one ``learn_on_batch``, so PPO builds
    this with ``num_sgd_iter=1``).

    Args:
        workers: the `WorkerSet`.
        num_sgd_iter: ``learn_on_batch`` calls per batch (>= 1).
        train_batch_size: env steps to gather per step (a batch may hold more: whole
            worker batches are kept).
        sample_async: pipeline the sampling (``WorkerSet.sample(pipelined=True)``):
            the remote workers sample the next batches while the driver learns, with
            weights one update older.

    Raises:
        ValueError: `num_sgd_iter` < 1.
    """

    def __init__(
        self,
        workers: WorkerSet,
        num_sgd_iter: int = 1,
        train_batch_size: int = 1,
        sample_async: bool = False,
    ) -> None:
        super().__init__(workers)
        if num_sgd_iter < 1:
            raise ValueError(f"num_sgd_iter must be >= 1, got {num_sgd_iter}")
        self.num_sgd_iter = int(num_sgd_iter)
        self.train_batch_size = int(train_batch_size)
        self.sample_async = bool(sample_async)
        self.config = {
            "num_sgd_iter": self.num_sgd_iter,
            "train_batch_size": self.train_batch_size,
            "sample_async": self.sample_async,
        }

    def step(self) -> dict[str, Any]:
        """Sample, learn, broadcast; returns the last ``learn_on_batch``'s
        ``{policy_id: stats}``."""
        batch = self.sample_batch(self.train_batch_size)
        local = self.workers.local_worker()
        stats: dict[str, Any] = {}
        for _ in range(self.num_sgd_iter):
            stats = local.learn_on_batch(batch)
        self.num_steps_trained += batch.count
        self.workers.sync_weights({"timestep": self.num_steps_sampled})
        return stats

    def sample_batch(self, min_steps: int) -> SampleBatch:
        """Sample from the workers until at least `min_steps` env steps (counted in
        ``num_steps_sampled``); the episodes that finished go to ``episodes``.

        Raises:
            RuntimeError: every remote worker has failed (see `WorkerSet.sample`).
        """
        batches, steps = [], 0
        while steps < min_steps:
            got, metrics = self.workers.sample(pipelined=self.sample_async)
            self.episodes.extend(metrics)
            for b in got:
                batches.append(b)
                steps += b.count
        batch: SampleBatch = SampleBatch.concat_samples(batches)
        self.num_steps_sampled += batch.count
        return batch
