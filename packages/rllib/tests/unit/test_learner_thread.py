"""IMPALA's learner-side pieces as pure objects: the minibatch ring buffer
(``num_sgd_iter`` / ``minibatch_buffer_size``), the sample replay
(``replay_proportion`` / ``replay_buffer_num_slots``) and the learner thread's loop
with a stub worker."""

from __future__ import annotations

import queue
import random
from typing import Any

import pytest

from rayfield.rllib.optimizers.learner_thread import LearnerThread, MinibatchBuffer, SampleReplay
from rayfield.testing import wait_for


def test_minibatch_buffer_uses_each_batch_num_passes_times() -> None:
    q: queue.Queue[Any] = queue.Queue()
    for b in "abcd":
        q.put(b)
    one = MinibatchBuffer(q, size=1, num_passes=3)
    got = [one.get(timeout=0) for _ in range(6)]
    assert [b for b, _ in got] == list("aaabbb")
    assert [r for _, r in got] == [False, False, True] * 2
    two = MinibatchBuffer(q, size=2, num_passes=2)  # c, d interleaved
    assert [two.get(timeout=0)[0] for _ in range(4)] == list("cdcd")
    with pytest.raises(queue.Empty):
        two.get(timeout=0)
    with pytest.raises(ValueError):
        MinibatchBuffer(q, size=0, num_passes=1)


def test_sample_replay_proportion_and_slots() -> None:
    replay = SampleReplay(num_slots=3, proportion=0.5, rng=random.Random(0))
    assert replay.replay() == []  # nothing kept yet
    for i in range(5):
        replay.add(i)
    assert sorted(replay.slots) == [2, 3, 4]  # the last 3 batches
    counts = [len(replay.replay()) for _ in range(4000)]
    assert set(counts) == {0, 1}
    assert sum(counts) / len(counts) == pytest.approx(0.5, abs=0.03)
    assert all(b in (2, 3, 4) for _ in range(50) for b in replay.replay())
    two = SampleReplay(num_slots=2, proportion=2.0)
    two.add("x")
    assert two.replay() == ["x", "x"]
    off = SampleReplay(num_slots=0, proportion=0.0)
    off.add("x")
    assert off.replay() == []
    with pytest.raises(ValueError, match="replay_buffer_num_slots"):
        SampleReplay(num_slots=0, proportion=0.5)


class _Batch:
    def __init__(self, count: int) -> None:
        self.count = count


class _Worker:
    def __init__(self, fail_on: int | None = None) -> None:
        self.seen: list[int] = []
        self.fail_on = fail_on

    def learn_on_batch(self, batch: _Batch) -> dict[str, Any]:
        if batch.count == self.fail_on:
            raise ZeroDivisionError("boom")
        self.seen.append(batch.count)
        return {"default_policy": {"n": batch.count}}


def test_learner_thread_learns_each_batch_num_sgd_iter_times() -> None:
    worker = _Worker()
    learner = LearnerThread(worker, minibatch_buffer_size=1, num_sgd_iter=2, learner_queue_size=4)
    learner.start()
    try:
        learner.inqueue.put(_Batch(5))
        learner.inqueue.put(_Batch(7))
        wait_for(lambda: learner.num_steps_trained == 24, timeout=10)
        assert worker.seen == [5, 5, 7, 7] and learner.weights_updated
        assert [learner.outqueue.get_nowait()[0] for _ in range(4)] == [5, 5, 7, 7]
    finally:
        learner.stop()
    assert not learner.is_alive()


def test_learner_thread_keeps_its_error() -> None:
    learner = LearnerThread(_Worker(fail_on=3))
    learner.start()
    learner.inqueue.put(_Batch(3))
    learner.join(timeout=10)
    assert isinstance(learner.error, ZeroDivisionError)
