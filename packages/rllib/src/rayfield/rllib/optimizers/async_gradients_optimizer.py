"""`AsyncGradientsOptimizer`: gradients computed on the rollout workers, applied on
the driver as they arrive."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer

if TYPE_CHECKING:
    from rayfield.rllib.evaluation.worker_set import WorkerSet


class AsyncGradientsOptimizer(PolicyOptimizer):
    """Async gradients, the execution of A3C (Mnih et al., "Asynchronous Methods for
    Deep Reinforcement Learning", ICML 2016): every remote worker samples a batch and
    computes its gradients (``sample_and_compute_gradients``); the driver applies each
    gradient to the local worker as it arrives and sends the new weights back to that
    worker only, which starts its next batch at once. A step applies `grads_per_step`
    gradients, so workers compute with weights a few updates old. Workers stay busy
    between steps (their calls in flight are kept until `stop`).

    With no remote workers the local worker samples and applies its own gradients,
    `grads_per_step` times, synchronously. A gradient's env steps count as sampled
    and as trained. A failed worker is handled by the `WorkerSet`'s failure policy
    (raise, drop, or recreate and restart it).

    Used by A3C.

    Args:
        workers: the `WorkerSet`.
        grads_per_step: gradients applied per `step` (>= 1).

    Raises:
        ValueError: `grads_per_step` < 1.
    """

    def __init__(self, workers: WorkerSet, grads_per_step: int = 100) -> None:
        super().__init__(workers)
        if grads_per_step < 1:
            raise ValueError(f"grads_per_step must be >= 1, got {grads_per_step}")
        self.grads_per_step = int(grads_per_step)
        self.config = {"grads_per_step": self.grads_per_step}
        self._inflight: dict[Any, Any] = {}  # object ref -> remote worker computing it

    def _launch(self, worker: Any) -> None:
        self._inflight[worker.sample_and_compute_gradients.remote()] = worker

    def _record(self, grads: Any, info: dict[str, Any], count: int, metrics: list[Any]) -> Any:
        """Apply one gradient on the local worker and count it; returns its stats as
        ``{policy_id: stats}``."""
        local = self.workers.local_worker()
        local.apply_gradients(grads)
        self.num_steps_sampled += count
        self.num_steps_trained += count
        self.episodes.extend(metrics)
        return info if local.multiagent else {"default_policy": info}

    def step(self) -> dict[str, Any]:
        """Apply `grads_per_step` gradients; returns ``{policy_id: stats}`` of the
        last gradient of each policy.

        Raises:
            rayfield.exceptions.RayfieldError: a worker failed and neither
                ``ignore_worker_failures`` nor ``recreate_failed_workers`` is set.
            RuntimeError: every remote worker has failed.
        """
        local = self.workers.local_worker()
        stats: dict[str, Any] = {}
        if not self.workers.remote_workers():
            for _ in range(self.grads_per_step):
                stats.update(self._record(*local.sample_and_compute_gradients()))
            return stats
        import rayfield
        from rayfield.exceptions import RayfieldError

        busy = set(self._inflight.values())
        for w in self.workers.remote_workers():
            if w not in busy:
                self._launch(w)
        applied = 0
        while applied < self.grads_per_step:
            (ref,), _ = rayfield.wait(list(self._inflight), num_returns=1)
            worker = self._inflight.pop(ref)
            try:
                result = rayfield.get(ref)
            except RayfieldError as exc:
                pos = self.workers.remote_workers().index(worker)
                self.workers.check_failure_allowed(pos, exc)
                recreated = self.workers.num_recreated
                self.workers.handle_failures([pos])
                if self.workers.num_recreated > recreated:  # a new worker took its place
                    self._launch(self.workers.remote_workers()[pos])
                continue
            stats.update(self._record(*result))
            worker.set_weights.remote(
                rayfield.put(local.get_weights()), {"timestep": self.num_steps_sampled}
            )
            self._launch(worker)
            applied += 1
        return stats

    def stop(self) -> None:
        """Forget the gradient calls in flight."""
        self._inflight = {}
