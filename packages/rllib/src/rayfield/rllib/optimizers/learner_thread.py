"""IMPALA's learner side (Espeholt et al. 2018, arXiv:1802.01561, section 3): a thread
that learns on train batches from a queue in a tight loop while the driver keeps the
rollout workers sampling, and the ring buffer that replays each train batch
``num_sgd_iter`` times (`MinibatchBuffer`) and the sample-batch replay of
``replay_proportion`` (`SampleReplay`). Pure objects except `LearnerThread`."""

from __future__ import annotations

import queue
import random
import threading
from typing import Any


class MinibatchBuffer:
    """A ring of `size` slots over a queue: `get` returns the batch in the current slot,
    each batch `num_passes` times in all, and refills a slot from the queue once its batch
    is used up. With ``size=1`` each batch is learned on `num_passes` times in a row;
    with more slots the passes of `size` batches are interleaved.

    Args:
        inqueue: where new batches come from (`queue.Queue`).
        size: slots (>= 1), RLlib's ``minibatch_buffer_size``.
        num_passes: uses of each batch (>= 1), RLlib's ``num_sgd_iter``.

    Raises:
        ValueError: `size` or `num_passes` < 1.
    """

    def __init__(self, inqueue: queue.Queue[Any], size: int, num_passes: int) -> None:
        if size < 1 or num_passes < 1:
            raise ValueError(f"size and num_passes must be >= 1, got {size} and {num_passes}")
        self.inqueue = inqueue
        self.size = int(size)
        self.num_passes = int(num_passes)
        self.buffers: list[Any] = [None] * self.size
        self.ttl = [0] * self.size
        self.idx = 0

    def get(self, timeout: float | None = None) -> tuple[Any, bool]:
        """``(batch, released)``: the next batch, and whether this was its last use.

        Raises:
            queue.Empty: the slot needed a new batch and none came within `timeout`.
        """
        if self.ttl[self.idx] <= 0:
            self.buffers[self.idx] = self.inqueue.get(timeout=timeout)
            self.ttl[self.idx] = self.num_passes
        batch = self.buffers[self.idx]
        self.ttl[self.idx] -= 1
        released = self.ttl[self.idx] <= 0
        if released:
            self.buffers[self.idx] = None
        self.idx = (self.idx + 1) % self.size
        return batch, released


class SampleReplay:
    """The sample-batch replay of IMPALA's ``replay_proportion`` /
    ``replay_buffer_num_slots`` (RLlib's): the last `num_slots` sample batches are kept,
    and after each new batch `replay` returns on average `proportion` batches drawn
    uniformly from them (the integer part always, the fractional part with that
    probability), so new and replayed batches reach the learner in a ``1 : proportion``
    ratio.

    Args:
        num_slots: batches kept (0: no replay).
        proportion: replayed batches per new batch (>= 0).
        rng: the random source (default: a fresh `random.Random`).

    Raises:
        ValueError: a negative `num_slots` or `proportion`, or ``proportion > 0`` with
            no slots.
    """

    def __init__(self, num_slots: int, proportion: float, rng: random.Random | None = None) -> None:
        if num_slots < 0 or proportion < 0:
            raise ValueError("replay_buffer_num_slots and replay_proportion must be >= 0")
        if proportion > 0 and num_slots == 0:
            raise ValueError("replay_proportion > 0 needs replay_buffer_num_slots > 0")
        self.num_slots = int(num_slots)
        self.proportion = float(proportion)
        self.slots: list[Any] = []
        self.next = 0
        self.rng = rng or random.Random()

    def add(self, batch: Any) -> None:
        """Keep `batch`, replacing the oldest when the slots are full."""
        if self.num_slots == 0:
            return
        if len(self.slots) < self.num_slots:
            self.slots.append(batch)
        else:
            self.slots[self.next] = batch
        self.next = (self.next + 1) % self.num_slots

    def replay(self) -> list[Any]:
        """The batches to replay after one new batch (see the class docstring)."""
        if not self.slots or self.proportion <= 0:
            return []
        whole = int(self.proportion)
        count = whole + (self.rng.random() < self.proportion - whole)
        return [self.rng.choice(self.slots) for _ in range(count)]


class LearnerThread(threading.Thread):
    """Learns on the local worker in a loop: takes train batches from `inqueue` (at most
    ``learner_queue_size`` waiting, so sampling blocks when the learner falls behind),
    each ``num_sgd_iter`` times through a `MinibatchBuffer`, and runs
    ``local_worker.learn_on_batch``. After each update ``weights_updated`` is set (the
    optimizer clears it when it broadcasts) and ``(rows, stats)`` goes to `outqueue`.
    An exception in learning ends the thread and is kept in ``error``.

    The policy's lock serialises learning with the driver's ``get_weights``.

    Args:
        local_worker: the learner's `RolloutWorker`.
        minibatch_buffer_size: `MinibatchBuffer` slots.
        num_sgd_iter: passes over each train batch.
        learner_queue_size: capacity of `inqueue`.
    """

    def __init__(
        self,
        local_worker: Any,
        minibatch_buffer_size: int = 1,
        num_sgd_iter: int = 1,
        learner_queue_size: int = 16,
    ) -> None:
        super().__init__(name="rllib-learner", daemon=True)
        self.local_worker = local_worker
        self.inqueue: queue.Queue[Any] = queue.Queue(maxsize=learner_queue_size)
        self.outqueue: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()
        self.minibatch_buffer = MinibatchBuffer(self.inqueue, minibatch_buffer_size, num_sgd_iter)
        self.weights_updated = False
        self.num_steps_trained = 0
        self.error: BaseException | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    batch, _ = self.minibatch_buffer.get(timeout=0.1)
                except queue.Empty:
                    continue
                stats = self.local_worker.learn_on_batch(batch)
                self.num_steps_trained += batch.count
                self.weights_updated = True
                self.outqueue.put((batch.count, stats))
        except BaseException as exc:  # handed to the driver by the optimizer's step
            self.error = exc

    def stop(self) -> None:
        """Ask the loop to end and wait for it (the current update finishes first)."""
        self._stopped.set()
        if self.is_alive():
            self.join()
