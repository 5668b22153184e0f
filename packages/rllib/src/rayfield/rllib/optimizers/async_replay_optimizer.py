"""`AsyncReplayOptimizer`: Ape-X's execution, distributed prioritized experience replay
(Horgan et al., "Distributed Prioritized Experience Replay", ICLR 2018,
arXiv:1803.00933, section 3 and Algorithms 1-2).

Three kinds of participants, as in the paper's Figure 1:

* **actors**: the remote rollout workers sample with their own exploration
  (``per_worker_exploration``) and, with ``worker_side_prioritization``, compute the
  initial priorities of their rows themselves (a ``priorities`` column, set by the
  policy's postprocessing), so new data never waits for the learner;
* **replay shards** (`ReplayShard`, one rayfield actor each, no CPU of its own): each
  holds ``buffer_size / num_replay_buffer_shards`` rows of prioritized replay, takes the
  actors' batches and serves ``train_batch_size``-row replay batches;
* **the learner** (`ApexLearnerThread`, a thread in the driver's process): learns on the
  replay batches as they come and sends each shard the new priorities
  ``|td_error| + prioritized_replay_eps`` of the rows it served.

The driver loop (`AsyncReplayOptimizer.step`) keeps two sample calls in flight per actor
and two replay calls per shard, hands every sampled batch to a random shard (by
reference: the batch goes from the actor to the shard through the object store, not
through the driver), and sends an actor the learner's newest weights once it has
sampled ``max_weight_sync_delay`` steps since its last ones (section 3: "actors copy
the network parameters from the learner periodically").

With no remote workers (``num_workers: 0``) the local worker samples, the shards are
plain objects in the driver and each step learns once, in the same thread: the same
data flow without processes, for tests and small runs.
"""

from __future__ import annotations

import queue
import random
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from rayfield.rllib.execution.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from rayfield.rllib.optimizers.learner_thread import LearnerThread
from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch

if TYPE_CHECKING:
    from rayfield.rllib.evaluation.worker_set import WorkerSet

__all__ = ["ApexLearnerThread", "AsyncReplayOptimizer", "ReplayShard"]

SAMPLE_QUEUE_DEPTH = 2  # sample calls in flight per actor
REPLAY_QUEUE_DEPTH = 2  # replay calls in flight per shard
LEARNER_QUEUE_SIZE = 16  # replay batches waiting for the learner


class ReplayShard:
    """One shard of Ape-X's replay memory: a (prioritized) replay buffer that takes
    sampled batches and serves replay batches. A pure object; `AsyncReplayOptimizer`
    runs each shard as a rayfield actor.

    Args:
        capacity: rows kept (>= 1); the oldest are overwritten first.
        learning_starts: rows this shard must have been given before `replay` serves.
        prioritized: prioritized (True) or uniform replay.
        alpha: the priority exponent (>= 0).
        beta: the importance-weight exponent (> 0).
        train_batch_size: rows per replay batch (>= 1).
        seed: seed of the sampling generator.

    Raises:
        ValueError: `capacity` or `train_batch_size` < 1, or `alpha` < 0.
    """

    def __init__(
        self,
        capacity: int,
        learning_starts: int = 0,
        prioritized: bool = True,
        alpha: float = 0.6,
        beta: float = 0.4,
        train_batch_size: int = 512,
        seed: int | None = None,
    ) -> None:
        if int(train_batch_size) < 1:
            raise ValueError(f"train_batch_size must be >= 1, got {train_batch_size}")
        self.buffer: ReplayBuffer = (
            PrioritizedReplayBuffer(capacity, alpha, seed)
            if prioritized
            else ReplayBuffer(capacity, seed)
        )
        self.learning_starts = int(learning_starts)
        self.beta = float(beta)
        self.train_batch_size = int(train_batch_size)
        self.num_added = 0
        self.num_sampled = 0
        self.num_priority_updates = 0
        self._start = time.monotonic()

    def add_batch(self, batch: SampleBatch) -> int:
        """Store `batch`'s rows, with its ``priorities`` column as their priorities when
        present (the column is not stored); returns the rows added.

        Raises:
            NotImplementedError: a `MultiAgentBatch` (Ape-X here is single-policy).
            ValueError: bad priorities (see `PrioritizedReplayBuffer.add_batch`).
        """
        if isinstance(batch, MultiAgentBatch):
            raise NotImplementedError("Ape-X replay shards take single-policy batches")
        if not batch.count:
            return 0
        data = SampleBatch({k: v for k, v in batch.items() if k != "priorities"})
        prios = batch.get("priorities")
        if isinstance(self.buffer, PrioritizedReplayBuffer):
            self.buffer.add_batch(data, prios)
        else:
            self.buffer.add_batch(data)
        self.num_added += data.count
        return int(data.count)

    def replay(self) -> SampleBatch | None:
        """A batch of ``train_batch_size`` rows (with ``weights`` and ``batch_indexes``),
        or None until ``learning_starts`` rows have been added."""
        if self.num_added < self.learning_starts or len(self.buffer) == 0:
            return None
        self.num_sampled += self.train_batch_size
        return self.buffer.sample(self.train_batch_size, beta=self.beta)

    def update_priorities(self, batch_indexes: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities for rows this shard served (prioritized replay only)."""
        if isinstance(self.buffer, PrioritizedReplayBuffer):
            self.buffer.update_priorities(batch_indexes, priorities)
            self.num_priority_updates += 1

    def stats(self) -> dict[str, Any]:
        """``num_added`` / ``num_sampled`` rows, ``size``, ``num_priority_updates`` and
        ``uptime_s`` (seconds since the shard was built)."""
        return {
            "num_added": self.num_added,
            "num_sampled": self.num_sampled,
            "size": len(self.buffer),
            "num_priority_updates": self.num_priority_updates,
            "uptime_s": time.monotonic() - self._start,
        }


def priorities_of(policy: Any, eps: float) -> np.ndarray:
    """``float64[B]``: ``|td_error| + eps`` of the batch `policy` last learned on."""
    return np.abs(policy.td_error.detach().cpu().numpy()).astype(np.float64) + eps


class ApexLearnerThread(LearnerThread):
    """Ape-X's learner: takes ``(shard, replay batch)`` pairs from `inqueue` (at most
    ``LEARNER_QUEUE_SIZE`` waiting, so the driver's loop slows when the learner falls
    behind), learns on each with ``local_worker.learn_on_batch`` and puts ``(shard,
    batch_indexes, new priorities, rows, stats)`` on `outqueue` for the driver to send
    back. After each update ``weights_updated`` is set. An exception ends the thread and
    is kept in ``error``; `stop` as `LearnerThread`'s.

    Args:
        local_worker: the learner's `RolloutWorker`.
        prioritized_replay_eps: added to ``|td_error|`` for the new priorities.
    """

    def __init__(self, local_worker: Any, prioritized_replay_eps: float = 1e-6) -> None:
        super().__init__(local_worker, learner_queue_size=LEARNER_QUEUE_SIZE)
        self.name = "rllib-apex-learner"
        self.eps = float(prioritized_replay_eps)
        self.outqueue: queue.Queue[Any] = queue.Queue()

    def learn(self, batch: SampleBatch) -> tuple[np.ndarray, dict[str, Any]]:
        """Learn on one replay batch; returns its rows' new priorities and the stats."""
        stats = self.local_worker.learn_on_batch(batch)
        prios = priorities_of(self.local_worker.policy_map[DEFAULT_POLICY_ID], self.eps)
        return prios, stats

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    shard, batch = self.inqueue.get(timeout=0.1)
                except queue.Empty:
                    continue
                prios, stats = self.learn(batch)
                self.num_steps_trained += batch.count
                self.weights_updated = True
                self.outqueue.put((shard, batch["batch_indexes"], prios, batch.count, stats))
        except BaseException as exc:  # handed to the driver by the optimizer's step
            self.error = exc


def _sample_for_replay(worker: Any) -> tuple[SampleBatch, tuple[int, list[Any]]]:
    """On an actor: one batch, and ``(its env steps, the episodes finished)`` as a second
    return value the driver reads without reading the batch."""
    batch = worker.sample()
    return batch, (int(batch.count), worker.get_metrics())


class AsyncReplayOptimizer(PolicyOptimizer):
    """Ape-X's execution (see the module docstring for the data flow).

    Args:
        workers: the `WorkerSet`; its local worker learns, its remote workers sample.
        learning_starts: rows given to the shards before any replay (split evenly).
        buffer_size: rows kept over all shards (split evenly, >= 1 each).
        prioritized_replay: prioritized (True) or uniform replay.
        prioritized_replay_alpha, prioritized_replay_beta: the priority and
            importance-weight exponents.
        prioritized_replay_eps: added to ``|td_error|`` for new priorities.
        train_batch_size: rows per replay batch.
        num_replay_buffer_shards: replay shards (>= 1).
        max_weight_sync_delay: env steps an actor samples between weight updates (>= 1).
        metrics_workers: the remote workers whose finished episodes are reported (None:
            all); Ape-X reports the third with the least exploration.
        seed: seeds the shards' sampling (shard ``k`` gets ``seed + k``).

    Raises:
        ValueError: an argument out of its range.
    """

    def __init__(
        self,
        workers: WorkerSet,
        learning_starts: int = 1000,
        buffer_size: int = 10000,
        prioritized_replay: bool = True,
        prioritized_replay_alpha: float = 0.6,
        prioritized_replay_beta: float = 0.4,
        prioritized_replay_eps: float = 1e-6,
        train_batch_size: int = 512,
        num_replay_buffer_shards: int = 1,
        max_weight_sync_delay: int = 400,
        metrics_workers: list[Any] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(workers)
        shards = int(num_replay_buffer_shards)
        for name, value in (
            ("num_replay_buffer_shards", shards),
            ("max_weight_sync_delay", max_weight_sync_delay),
            ("train_batch_size", train_batch_size),
        ):
            if int(value) < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if int(buffer_size) < shards:
            raise ValueError(
                f"buffer_size ({buffer_size}) must be at least num_replay_buffer_shards "
                f"({shards}): each shard keeps buffer_size / num_replay_buffer_shards rows"
            )
        self.config = {
            "learning_starts": int(learning_starts),
            "buffer_size": int(buffer_size),
            "prioritized_replay": bool(prioritized_replay),
            "prioritized_replay_alpha": float(prioritized_replay_alpha),
            "prioritized_replay_beta": float(prioritized_replay_beta),
            "prioritized_replay_eps": float(prioritized_replay_eps),
            "train_batch_size": int(train_batch_size),
            "num_replay_buffer_shards": shards,
            "max_weight_sync_delay": int(max_weight_sync_delay),
        }
        self.learning_starts = int(learning_starts)
        self.max_weight_sync_delay = int(max_weight_sync_delay)
        self.eps = float(prioritized_replay_eps)
        self.rng = random.Random(seed)
        shard_args = [
            (
                int(buffer_size) // shards,
                int(learning_starts) // shards,
                bool(prioritized_replay),
                float(prioritized_replay_alpha),
                float(prioritized_replay_beta),
                int(train_batch_size),
                None if seed is None else int(seed) + k,
            )
            for k in range(shards)
        ]
        remote = workers.remote_workers()
        self.learner: ApexLearnerThread | None = None
        self.local_shards: list[ReplayShard] = []
        self.replay_actors: list[Any] = []
        if remote:
            import rayfield

            shard_cls = rayfield.remote(num_cpus=0)(ReplayShard)
            self.replay_actors = [shard_cls.remote(*args) for args in shard_args]
            self.learner = ApexLearnerThread(workers.local_worker(), self.eps)
            self.learner.start()
        else:
            self.local_shards = [ReplayShard(*args) for args in shard_args]
        self.metrics_workers = None if metrics_workers is None else list(metrics_workers)
        self._sample_calls: dict[Any, tuple[Any, Any]] = {}  # info ref -> (worker, batch ref)
        self._replay_calls: dict[Any, Any] = {}  # replay ref -> shard actor
        self._steps_since_sync: dict[Any, int] = {}
        self._weights_ref: Any = None
        self.num_weight_syncs = 0
        self.num_samples_dropped = 0
        self._last_stats: dict[str, Any] = {}

    # -- the step ---------------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        """Take the sample and replay calls that are ready (waiting for at least one),
        route samples to the shards and replays to the learner, send priorities and
        weights back, and relaunch; returns the learner's latest ``{policy_id: stats}``.

        Raises:
            RuntimeError: the learner thread failed (chained to its exception), or every
                remote worker has failed.
            rayfield.exceptions.RayfieldError: a worker failed and neither
                ``ignore_worker_failures`` nor ``recreate_failed_workers`` is set.
        """
        if self.learner is None:
            return self._step_local()
        import rayfield

        self._check_learner()
        self._launch()
        sample_refs = list(self._sample_calls)
        replay_refs = list(self._replay_calls)
        refs = sample_refs + replay_refs
        while not rayfield.wait(refs, num_returns=1, timeout=1.0)[0]:
            self._check_learner()
        ready = set(rayfield.wait(refs, num_returns=len(refs), timeout=0)[0])
        for ref in sample_refs:
            if ref in ready:
                self._take_sample(ref)
        for ref in replay_refs:
            if ref in ready:
                self._take_replay(ref)
        self._drain_learner()
        return self._last_stats

    def _launch(self) -> None:
        """Keep ``SAMPLE_QUEUE_DEPTH`` sample calls per actor and, once
        ``learning_starts`` steps are sampled, ``REPLAY_QUEUE_DEPTH`` replay calls per
        shard in flight."""
        for w in self.workers.remote_workers():
            have = sum(1 for v, _ in self._sample_calls.values() if v is w)
            for _ in range(SAMPLE_QUEUE_DEPTH - have):
                batch_ref, info_ref = w.apply.options(num_returns=2).remote(_sample_for_replay)
                self._sample_calls[info_ref] = (w, batch_ref)
        if self.num_steps_sampled < self.learning_starts:
            return
        for shard in self.replay_actors:
            have = sum(1 for s in self._replay_calls.values() if s is shard)
            for _ in range(REPLAY_QUEUE_DEPTH - have):
                self._replay_calls[shard.replay.remote()] = shard

    def _take_sample(self, info_ref: Any) -> None:
        import rayfield
        from rayfield.exceptions import RayfieldError

        entry = self._sample_calls.pop(info_ref, None)
        if entry is None:  # dropped with its failed worker earlier in this step
            return
        worker, batch_ref = entry
        try:
            count, metrics = rayfield.get(info_ref)
        except RayfieldError as exc:
            self._worker_failed(worker, exc)
            return
        self.rng.choice(self.replay_actors).add_batch.remote(batch_ref)
        self.num_steps_sampled += count
        if self.metrics_workers is None or worker in self.metrics_workers:
            self.episodes.extend(metrics)
        self._steps_since_sync[worker] = self._steps_since_sync.get(worker, 0) + count
        if self._steps_since_sync[worker] >= self.max_weight_sync_delay:
            self._sync_weights(worker)

    def _sync_weights(self, worker: Any) -> None:
        """Send `worker` the learner's newest weights (one store put per update)."""
        import rayfield

        learner = self.learner
        assert learner is not None
        if learner.weights_updated or self._weights_ref is None:
            learner.weights_updated = False
            self._weights_ref = rayfield.put(self.workers.local_worker().get_weights())
        worker.set_weights.remote(self._weights_ref, {"timestep": self.num_steps_sampled})
        self._steps_since_sync[worker] = 0
        self.num_weight_syncs += 1

    def _take_replay(self, ref: Any) -> None:
        import rayfield

        shard = self._replay_calls.pop(ref)
        batch = rayfield.get(ref)
        if batch is None:  # the shard has not reached its learning_starts yet
            return
        # the store's arrays are read-only views; torch wants writable ones
        batch = SampleBatch({k: np.array(v) for k, v in batch.items()})
        assert self.learner is not None
        while True:
            self._check_learner()
            try:
                self.learner.inqueue.put((shard, batch), timeout=0.5)
                return
            except queue.Full:
                self._drain_learner()

    def _drain_learner(self) -> None:
        assert self.learner is not None
        while True:
            try:
                shard, idx, prios, count, stats = self.learner.outqueue.get_nowait()
            except queue.Empty:
                break
            if self.config["prioritized_replay"]:
                shard.update_priorities.remote(idx, prios)
            self.num_steps_trained += count
            self._last_stats = stats

    def _check_learner(self) -> None:
        if self.learner is not None and self.learner.error is not None:
            raise RuntimeError("Ape-X's learner thread failed") from self.learner.error

    def _worker_failed(self, worker: Any, exc: BaseException) -> None:
        pos = self.workers.remote_workers().index(worker)
        self.workers.check_failure_allowed(pos, exc)
        self._sample_calls = {r: v for r, v in self._sample_calls.items() if v[0] is not worker}
        self._steps_since_sync.pop(worker, None)
        reported = self.metrics_workers is not None and worker in self.metrics_workers
        if reported:
            self.metrics_workers.remove(worker)  # type: ignore[union-attr]
        before = len(self.workers.remote_workers())
        self.workers.handle_failures([pos])
        remote = self.workers.remote_workers()
        if reported and len(remote) == before:
            # recreated in its place (recreate_failed_workers): the new one reports instead
            self.metrics_workers.append(remote[pos])  # type: ignore[union-attr]

    def _step_local(self) -> dict[str, Any]:
        """No remote workers: sample one batch on the local worker into a random shard,
        then learn once on a replay batch from a random shard (once it has one)."""
        local = self.workers.local_worker()
        batch = local.sample()
        self.episodes.extend(local.get_metrics())
        self.rng.choice(self.local_shards).add_batch(batch)
        self.num_steps_sampled += batch.count
        if self.num_steps_sampled < self.learning_starts:
            return self._last_stats
        shard = self.rng.choice(self.local_shards)
        replay = shard.replay()
        if replay is None:
            return self._last_stats
        self._last_stats = local.learn_on_batch(replay)
        if self.config["prioritized_replay"]:
            policy = local.policy_map[DEFAULT_POLICY_ID]
            shard.update_priorities(replay["batch_indexes"], priorities_of(policy, self.eps))
        self.num_steps_trained += replay.count
        return self._last_stats

    # -- reporting --------------------------------------------------------------------
    def shard_stats(self) -> list[dict[str, Any]]:
        """Each shard's `ReplayShard.stats` (a remote call per shard actor)."""
        if self.local_shards:
            return [s.stats() for s in self.local_shards]
        import rayfield

        return list(rayfield.get([s.stats.remote() for s in self.replay_actors]))

    def stats(self) -> dict[str, Any]:
        """The counters, plus ``num_weight_syncs``, ``learner_queue_size`` and the
        shards' ``replay_shard_*`` totals."""
        out = super().stats()
        out["num_weight_syncs"] = self.num_weight_syncs
        if self.learner is not None:
            out["learner_queue_size"] = self.learner.inqueue.qsize()
        shards = self.shard_stats()
        for key in ("num_added", "num_sampled", "size"):
            out[f"replay_shard_{key}"] = sum(s[key] for s in shards)
        return out

    def stop(self) -> None:
        """Stop the learner thread, forget the calls in flight and end the shard actors."""
        if self.learner is not None:
            self.learner.stop()
        self._sample_calls = {}
        self._replay_calls = {}
        if self.replay_actors:
            import rayfield

            for shard in self.replay_actors:
                try:
                    rayfield.kill(shard)
                except Exception:  # already gone
                    pass
            self.replay_actors = []
