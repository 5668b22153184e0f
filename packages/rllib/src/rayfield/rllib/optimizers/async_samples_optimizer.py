"""`AsyncSamplesOptimizer`: IMPALA's execution, asynchronous sampling feeding a learner
thread (Espeholt et al. 2018, arXiv:1802.01561, section 3)."""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

from rayfield.rllib.optimizers.learner_thread import LearnerThread, SampleReplay
from rayfield.rllib.optimizers.policy_optimizer import PolicyOptimizer
from rayfield.rllib.policy.sample_batch import SampleBatch

if TYPE_CHECKING:
    from rayfield.rllib.evaluation.worker_set import WorkerSet


class AsyncSamplesOptimizer(PolicyOptimizer):
    """Async samples, the execution of IMPALA and APPO. Data flow (RLlib's):

    1. Every remote rollout worker has ``max_sample_requests_in_flight_per_worker``
       sample calls in flight; `step` waits on them with ``rayfield.wait`` and takes each
       batch (``rollout_fragment_length * num_envs_per_worker`` steps) as it comes.
    2. With ``replay_buffer_num_slots`` > 0 the batch is kept, and on average
       ``replay_proportion`` kept batches are replayed after it (`SampleReplay`).
    3. Batches are concatenated into train batches of at least ``train_batch_size`` rows
       and put on the learner queue (``learner_queue_size``; sampling waits when full).
    4. The learner thread (`LearnerThread`, in the driver's process, needing no CPU of
       its own) learns on each train batch ``num_sgd_iter`` times (ring of
       ``minibatch_buffer_size`` batches).
    5. After the learner has updated, new weights are put in the object store once and
       sent to the next ``broadcast_interval`` workers that return a batch (one with
       older weights gets them before its next sample call); then a new put is made.

    With no remote workers the local worker samples, and the train batches are learned on
    in `step` itself (synchronously, the same replay and passes), for tests and small
    runs. A failed worker is handled by the `WorkerSet`'s failure policy.

    Args:
        workers: the `WorkerSet`.
        train_batch_size: rows per train batch.
        max_sample_requests_in_flight_per_worker: sample calls kept in flight (>= 1).
        broadcast_interval: workers served by one weights put (>= 1).
        num_sgd_iter: passes over each train batch (>= 1).
        minibatch_buffer_size: train batches whose passes are interleaved (>= 1).
        learner_queue_size: train batches waiting for the learner (>= 1).
        replay_proportion: replayed batches per new batch (>= 0).
        replay_buffer_num_slots: sample batches kept for replay (>= 0).

    Raises:
        ValueError: an argument out of its range.
    """

    def __init__(
        self,
        workers: WorkerSet,
        train_batch_size: int = 500,
        max_sample_requests_in_flight_per_worker: int = 2,
        broadcast_interval: int = 1,
        num_sgd_iter: int = 1,
        minibatch_buffer_size: int = 1,
        learner_queue_size: int = 16,
        replay_proportion: float = 0.0,
        replay_buffer_num_slots: int = 0,
    ) -> None:
        super().__init__(workers)
        for name, value in (
            ("train_batch_size", train_batch_size),
            ("max_sample_requests_in_flight_per_worker", max_sample_requests_in_flight_per_worker),
            ("broadcast_interval", broadcast_interval),
            ("num_sgd_iter", num_sgd_iter),
            ("minibatch_buffer_size", minibatch_buffer_size),
            ("learner_queue_size", learner_queue_size),
        ):
            if int(value) < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.config = {
            "train_batch_size": int(train_batch_size),
            "max_sample_requests_in_flight_per_worker": int(
                max_sample_requests_in_flight_per_worker
            ),
            "broadcast_interval": int(broadcast_interval),
            "num_sgd_iter": int(num_sgd_iter),
            "minibatch_buffer_size": int(minibatch_buffer_size),
            "learner_queue_size": int(learner_queue_size),
            "replay_proportion": float(replay_proportion),
            "replay_buffer_num_slots": int(replay_buffer_num_slots),
        }
        self.train_batch_size = int(train_batch_size)
        self.replay = SampleReplay(int(replay_buffer_num_slots), float(replay_proportion))
        self._pending: list[SampleBatch] = []
        self._pending_rows = 0
        self._inflight: dict[Any, Any] = {}  # object ref -> remote worker sampling it
        self._weights_ref: Any = None
        self._weights_version = 0
        self._worker_version: dict[Any, int] = {}
        self._sent_since_put = 0
        self.num_weight_broadcasts = 0
        self.learner: LearnerThread | None = None
        if workers.remote_workers():
            self.learner = LearnerThread(
                workers.local_worker(), minibatch_buffer_size, num_sgd_iter, learner_queue_size
            )
            self.learner.start()
        self._last_stats: dict[str, Any] = {}

    # -- sampling ---------------------------------------------------------------------
    def _launch(self, worker: Any) -> None:
        self._inflight[worker.sample_and_metrics.remote()] = worker

    def _add_sample(self, batch: SampleBatch) -> list[SampleBatch]:
        """Take a new batch (and its replays); returns the train batches completed."""
        self.num_steps_sampled += batch.count
        out = []
        for b in [batch, *self.replay.replay()]:
            self._pending.append(b)
            self._pending_rows += b.count
            if self._pending_rows >= self.train_batch_size:
                out.append(SampleBatch.concat_samples(self._pending))
                self._pending, self._pending_rows = [], 0
        self.replay.add(batch)
        return out

    def _send_weights(self, worker: Any) -> None:
        """Give `worker` the newest weights if it lacks them (step 5 of the class
        docstring)."""
        import rayfield

        learner = self.learner
        assert learner is not None
        if learner.weights_updated and (
            self._weights_ref is None or self._sent_since_put >= self.config["broadcast_interval"]
        ):
            learner.weights_updated = False
            self._weights_ref = rayfield.put(self.workers.local_worker().get_weights())
            self._weights_version += 1
            self._sent_since_put = 0
            self.num_weight_broadcasts += 1
        if self._weights_ref is not None and self._worker_version.get(worker, 0) < (
            self._weights_version
        ):
            worker.set_weights.remote(self._weights_ref, {"timestep": self.num_steps_sampled})
            self._worker_version[worker] = self._weights_version
            self._sent_since_put += 1

    def _check_learner(self) -> None:
        if self.learner is not None and self.learner.error is not None:
            raise RuntimeError("IMPALA's learner thread failed") from self.learner.error

    def _to_learner(self, train_batch: SampleBatch) -> None:
        """Put a train batch on the learner queue, waiting while it is full."""
        assert self.learner is not None
        while True:
            self._check_learner()
            try:
                self.learner.inqueue.put(train_batch, timeout=0.5)
                return
            except queue.Full:
                continue

    def _drain_learner(self) -> None:
        assert self.learner is not None
        while True:
            try:
                count, stats = self.learner.outqueue.get_nowait()
            except queue.Empty:
                break
            self.num_steps_trained += count
            self._last_stats = stats

    # -- the step ---------------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        """Take the sample batches that are ready (waiting for at least one), feed the
        learner, send weights and relaunch the workers; returns the learner's latest
        ``{policy_id: stats}``.

        Raises:
            RuntimeError: the learner thread failed (chained to its exception), or every
                remote worker has failed.
            rayfield.exceptions.RayfieldError: a worker failed and neither
                ``ignore_worker_failures`` nor ``recreate_failed_workers`` is set.
        """
        if self.learner is None:
            return self._step_local()
        import rayfield
        from rayfield.exceptions import RayfieldError

        self._check_learner()
        per_worker = self.config["max_sample_requests_in_flight_per_worker"]
        for w in self.workers.remote_workers():
            for _ in range(per_worker - sum(1 for v in self._inflight.values() if v is w)):
                self._launch(w)
        refs = list(self._inflight)
        while not rayfield.wait(refs, num_returns=1, timeout=1.0)[0]:
            self._check_learner()
        ready, _ = rayfield.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            worker = self._inflight.pop(ref, None)
            if worker is None:  # dropped with its failed worker
                continue
            try:
                batch, metrics = rayfield.get(ref)
            except RayfieldError as exc:
                self._worker_failed(worker, exc)
                continue
            self.episodes.extend(metrics)
            for train_batch in self._add_sample(batch):
                self._to_learner(train_batch)
            self._send_weights(worker)
            self._launch(worker)
        self._drain_learner()
        return self._last_stats

    def _worker_failed(self, worker: Any, exc: BaseException) -> None:
        pos = self.workers.remote_workers().index(worker)
        self.workers.check_failure_allowed(pos, exc)
        self._inflight = {r: w for r, w in self._inflight.items() if w is not worker}
        self._worker_version.pop(worker, None)
        self.workers.handle_failures([pos])

    def _step_local(self) -> dict[str, Any]:
        """No remote workers: sample one batch on the local worker and learn on every
        train batch completed, ``num_sgd_iter`` passes in a row each."""
        local = self.workers.local_worker()
        batch = local.sample()
        self.episodes.extend(local.get_metrics())
        for train_batch in self._add_sample(batch):
            for _ in range(self.config["num_sgd_iter"]):
                self._last_stats = local.learn_on_batch(train_batch)
            self.num_steps_trained += train_batch.count * self.config["num_sgd_iter"]
        return self._last_stats

    def stats(self) -> dict[str, Any]:
        """The counters, plus ``num_weight_broadcasts`` and the learner queue's size."""
        out = super().stats()
        out["num_weight_broadcasts"] = self.num_weight_broadcasts
        if self.learner is not None:
            out["learner_queue_size"] = self.learner.inqueue.qsize()
        return out

    def stop(self) -> None:
        """Stop the learner thread and forget the sample calls in flight."""
        if self.learner is not None:
            self.learner.stop()
        self._inflight = {}
