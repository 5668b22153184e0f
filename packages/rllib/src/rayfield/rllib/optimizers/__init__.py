"""Policy optimizers: the execution patterns that move samples and gradients between
the rollout workers and the learner (RLlib 0.7's ``ray.rllib.optimizers``).

* `SyncSamplesOptimizer`: sync samples, learn on the local worker (PG, A2C, PPO).
* `AsyncGradientsOptimizer`: gradients computed on the workers, applied as they arrive
  (A3C).
* `AsyncSamplesOptimizer`: samples gathered as they arrive, learned on by a learner
  thread (IMPALA, APPO).
* `SyncReplayOptimizer`: sync samples into replay buffers, learn on replayed batches,
  prioritized replay (DQN).
* `SyncBatchReplayOptimizer`: sync samples into a buffer of whole batches, learn on
  batches drawn from it (MARWIL, BC).

Importing this package does not import torch.
"""

from __future__ import annotations

from rayfield.rllib.optimizers.async_gradients_optimizer import AsyncGradientsOptimizer
from rayfield.rllib.optimizers.async_samples_optimizer import AsyncSamplesOptimizer
from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer
from rayfield.rllib.optimizers.sync_batch_replay_optimizer import SyncBatchReplayOptimizer
from rayfield.rllib.optimizers.sync_replay_optimizer import SyncReplayOptimizer
from rayfield.rllib.optimizers.sync_samples_optimizer import SyncSamplesOptimizer

__all__ = [
    "AsyncGradientsOptimizer",
    "AsyncSamplesOptimizer",
    "PolicyOptimizer",
    "SyncBatchReplayOptimizer",
    "SyncReplayOptimizer",
    "SyncSamplesOptimizer",
]
