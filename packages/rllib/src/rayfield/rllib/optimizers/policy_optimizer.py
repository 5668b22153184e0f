"""`PolicyOptimizer`: the base of the execution patterns that move samples and
gradients between a `WorkerSet`'s rollout workers and its local (learner) worker.

A trainer builds one in ``_init`` (``trainer.optimizer``) and its `training_step` calls
`PolicyOptimizer.step`. The optimizer counts the env steps it sampled and trained on;
the trainer reports those counts (``timesteps_total``, ``info.num_steps_trained``) and
collects the episodes that finished while sampling with `take_episodes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.rllib.evaluation.episode import RolloutMetrics
    from rayfield.rllib.evaluation.worker_set import WorkerSet


class PolicyOptimizer:
    """Base class of the policy optimizers.

    Args:
        workers: the `WorkerSet` to sample from and train on (its local worker learns).

    Attributes:
        config: the optimizer's own arguments (JSON-able), as passed to the constructor.
        workers: the `WorkerSet`.
        num_steps_sampled: env steps sampled so far (also after `restore`).
        num_steps_trained: env steps (rows) learned on so far.
        episodes: `RolloutMetrics` of the episodes that finished while sampling, not yet
            taken by `take_episodes`.
    """

    def __init__(self, workers: WorkerSet) -> None:
        self.workers = workers
        self.config: dict[str, Any] = {}
        self.num_steps_sampled = 0
        self.num_steps_trained = 0
        self.episodes: list[RolloutMetrics] = []

    def step(self) -> dict[str, Any]:
        """One logical step (sampling and learning); returns the learner statistics,
        ``{policy_id: stats}``."""
        raise NotImplementedError

    def take_episodes(self) -> list[RolloutMetrics]:
        """The episodes finished since the last call (and forget them)."""
        out, self.episodes = self.episodes, []
        return out

    def stats(self) -> dict[str, Any]:
        """Counters for the result's ``info``: ``num_steps_sampled``, ``num_steps_trained``."""
        return {
            "num_steps_sampled": self.num_steps_sampled,
            "num_steps_trained": self.num_steps_trained,
        }

    def save(self) -> dict[str, Any]:
        """The optimizer's state as plain JSON-able data (the counters)."""
        return {
            "num_steps_sampled": self.num_steps_sampled,
            "num_steps_trained": self.num_steps_trained,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Set the state `save` returned (missing counters are left as they are)."""
        self.num_steps_sampled = int(state.get("num_steps_sampled", self.num_steps_sampled))
        self.num_steps_trained = int(state.get("num_steps_trained", self.num_steps_trained))

    def stop(self) -> None:
        """Release what the optimizer holds between steps (in-flight remote calls)."""

    def foreach_worker(self, func: Callable[[Any], Any]) -> list[Any]:
        """``func(worker)`` on the local worker and every remote one (local first)."""
        return self.workers.foreach_worker(func)

    def foreach_worker_with_index(self, func: Callable[[Any, int], Any]) -> list[Any]:
        """``func(worker, index)`` on every worker; the local worker has index 0."""
        return self.workers.foreach_worker_with_index(func)

    # RLlib 0.5/0.6 names ("policy evaluators")
    foreach_evaluator = foreach_worker
    foreach_evaluator_with_index = foreach_worker_with_index

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"
