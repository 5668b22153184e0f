"""The policy optimizers (`rayfield.rllib.optimizers`) with a fake local worker: no
cluster, no env, no torch model."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

from rayfield.rllib.execution.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from rayfield.rllib.optimizers import (
    AsyncGradientsOptimizer,
    PolicyOptimizer,
    SyncReplayOptimizer,
    SyncSamplesOptimizer,
)
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch

FRAGMENT = 20  # env steps per fake sample


class FakePolicy:
    """Records what it learned on; sets ``td_error`` as DQN's policy does."""

    def __init__(self, td: float = 5.0) -> None:
        self.td = td
        self.learned: list[SampleBatch] = []
        self.td_error: torch.Tensor | None = None

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, Any]:
        self.learned.append(batch)
        self.td_error = torch.full((batch.count,), -self.td)
        return {"rows": batch.count}


class FakeWorker:
    """A local rollout worker: `FRAGMENT`-step batches, one finished episode each."""

    multiagent = False

    def __init__(self) -> None:
        self.policy = FakePolicy()
        self.policy_map = {DEFAULT_POLICY_ID: self.policy}
        self.policies_to_train = [DEFAULT_POLICY_ID]
        self.samples = 0
        self.learn_calls = 0
        self.applied: list[Any] = []

    def sample(self) -> SampleBatch:
        start = self.samples * FRAGMENT
        self.samples += 1
        return SampleBatch(
            obs=np.arange(start, start + FRAGMENT, dtype=np.float32)[:, None],
            actions=np.zeros(FRAGMENT, dtype=np.int64),
            rewards=np.ones(FRAGMENT, dtype=np.float32),
        )

    def get_metrics(self) -> list[str]:
        return [f"episode-{self.samples}"]

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, Any]:
        self.learn_calls += 1
        return {DEFAULT_POLICY_ID: {"rows": batch.count}}

    def sample_and_compute_gradients(self) -> tuple[Any, dict[str, Any], int, list[str]]:
        batch = self.sample()
        return f"grad-{self.samples}", {"loss": 1.0}, batch.count, self.get_metrics()

    def apply_gradients(self, grads: Any) -> None:
        self.applied.append(grads)


class FakeWorkerSet:
    """`WorkerSet`'s interface with a local worker only."""

    def __init__(self) -> None:
        self.local = FakeWorker()
        self.synced: list[dict[str, Any] | None] = []

    def local_worker(self) -> FakeWorker:
        return self.local

    def remote_workers(self) -> list[Any]:
        return []

    def sample(self, pipelined: bool = False) -> tuple[list[SampleBatch], list[str]]:
        return [self.local.sample()], self.local.get_metrics()

    def sync_weights(self, global_vars: dict[str, Any] | None = None) -> None:
        self.synced.append(global_vars)

    def foreach_worker(self, func: Any) -> list[Any]:
        return [func(self.local)]

    def foreach_worker_with_index(self, func: Any) -> list[Any]:
        return [func(self.local, 0)]


def test_sync_samples_counts_and_learns_num_sgd_iter_times() -> None:
    workers = FakeWorkerSet()
    opt = SyncSamplesOptimizer(workers, num_sgd_iter=3, train_batch_size=50)  # type: ignore[arg-type]
    stats = opt.step()
    # 3 fragments of 20 reach 50 steps; whole fragments are kept
    assert opt.num_steps_sampled == 60 and opt.num_steps_trained == 60
    assert workers.local.learn_calls == 3
    assert stats == {DEFAULT_POLICY_ID: {"rows": 60}}
    assert workers.synced == [{"timestep": 60}]
    assert opt.take_episodes() == ["episode-1", "episode-2", "episode-3"]
    assert opt.take_episodes() == []
    opt.step()
    assert (opt.num_steps_sampled, opt.num_steps_trained) == (120, 120)
    assert opt.stats() == {"num_steps_sampled": 120, "num_steps_trained": 120}


def test_async_gradients_applies_grads_per_step() -> None:
    workers = FakeWorkerSet()
    opt = AsyncGradientsOptimizer(workers, grads_per_step=7)  # type: ignore[arg-type]
    stats = opt.step()
    assert workers.local.applied == [f"grad-{i}" for i in range(1, 8)]
    assert opt.num_steps_sampled == 7 * FRAGMENT and opt.num_steps_trained == 7 * FRAGMENT
    assert stats == {DEFAULT_POLICY_ID: {"loss": 1.0}}
    assert len(opt.take_episodes()) == 7
    opt.step()
    assert len(workers.local.applied) == 14
    opt.stop()


def test_sync_replay_respects_learning_starts() -> None:
    workers = FakeWorkerSet()
    opt = SyncReplayOptimizer(  # type: ignore[arg-type]
        workers, learning_starts=50, buffer_size=100, train_batch_size=8, seed=0
    )
    buffer = opt.replay_buffers[DEFAULT_POLICY_ID]
    assert isinstance(buffer, PrioritizedReplayBuffer)
    for sampled in (20, 40):
        assert opt.step() == {DEFAULT_POLICY_ID: {}}
        assert opt.num_steps_sampled == sampled and opt.num_steps_trained == 0
        assert len(buffer) == sampled
    assert opt.step() == {DEFAULT_POLICY_ID: {"rows": 8}}  # 60 >= learning_starts
    assert opt.num_steps_sampled == 60 and opt.num_steps_trained == 8
    assert workers.synced[-1] == {"timestep": 60}
    assert len(opt.take_episodes()) == 3


def test_sync_replay_updates_priorities() -> None:
    workers = FakeWorkerSet()
    opt = SyncReplayOptimizer(  # type: ignore[arg-type]
        workers,
        learning_starts=0,
        train_batch_size=16,
        prioritized_replay_alpha=0.5,
        prioritized_replay_eps=0.25,
        seed=0,
    )
    buffer = opt.replay_buffers[DEFAULT_POLICY_ID]
    opt.step()
    replayed = workers.local.policy.learned[-1]
    assert "weights" in replayed and replayed.count == 16
    # |td_error| + eps = 5.25, to the power alpha
    idx = replayed["batch_indexes"]
    assert np.allclose(buffer._sum[idx], 5.25**0.5)
    untouched = np.setdiff1d(np.arange(FRAGMENT), idx)
    assert np.allclose(buffer._sum[untouched], 1.0)  # new rows: the initial max priority 1


def test_sync_replay_uniform_and_beta_annealing() -> None:
    workers = FakeWorkerSet()
    opt = SyncReplayOptimizer(  # type: ignore[arg-type]
        workers,
        prioritized_replay=False,
        prioritized_replay_beta=0.4,
        final_prioritized_replay_beta=1.0,
        schedule_max_timesteps=1000,
        beta_annealing_fraction=0.5,
    )
    assert type(opt.replay_buffers[DEFAULT_POLICY_ID]) is ReplayBuffer
    assert opt.beta_schedule.value(0) == pytest.approx(0.4)
    assert opt.beta_schedule.value(250) == pytest.approx(0.7)
    assert opt.beta_schedule.value(10_000) == pytest.approx(1.0)


def test_save_restore_round_trip() -> None:
    opt = SyncSamplesOptimizer(FakeWorkerSet(), train_batch_size=30)  # type: ignore[arg-type]
    opt.step()
    state = json.loads(json.dumps(opt.save()))  # plain JSON data
    assert state == {"num_steps_sampled": 40, "num_steps_trained": 40}
    other = SyncReplayOptimizer(FakeWorkerSet())  # type: ignore[arg-type]
    other.restore(state)
    assert (other.num_steps_sampled, other.num_steps_trained) == (40, 40)
    other.restore({})  # missing counters are kept
    assert other.num_steps_sampled == 40


def test_foreach_worker_and_evaluator_aliases() -> None:
    workers = FakeWorkerSet()
    opt = AsyncGradientsOptimizer(workers)  # type: ignore[arg-type]
    assert opt.foreach_evaluator(lambda w: w is workers.local) == [True]
    assert opt.foreach_worker(lambda w: w.samples) == [0]
    assert opt.foreach_evaluator_with_index(lambda w, i: i) == [0]
    assert opt.foreach_worker_with_index(lambda w, i: (w.samples, i)) == [(0, 0)]
    assert PolicyOptimizer.foreach_evaluator is PolicyOptimizer.foreach_worker


def test_arguments_and_defaults() -> None:
    workers = FakeWorkerSet()
    assert SyncSamplesOptimizer(workers).config == {  # type: ignore[arg-type]
        "num_sgd_iter": 1,
        "train_batch_size": 1,
        "sample_async": False,
    }
    assert AsyncGradientsOptimizer(workers).grads_per_step == 100  # type: ignore[arg-type]
    replay = SyncReplayOptimizer(workers)  # type: ignore[arg-type]
    assert replay.config["learning_starts"] == 1000 and replay.config["buffer_size"] == 10000
    assert replay.config["prioritized_replay_eps"] == 1e-6 and replay.train_batch_size == 32
    with pytest.raises(ValueError, match="num_sgd_iter"):
        SyncSamplesOptimizer(workers, num_sgd_iter=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grads_per_step"):
        AsyncGradientsOptimizer(workers, grads_per_step=0)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError):
        PolicyOptimizer(workers).step()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("module", "trainer", "optimizer"),
    [
        ("pg", "PGTrainer", SyncSamplesOptimizer),
        ("a3c", "A2CTrainer", SyncSamplesOptimizer),
        ("a3c", "A3CTrainer", AsyncGradientsOptimizer),
        ("ppo", "PPOTrainer", SyncSamplesOptimizer),
        ("dqn", "DQNTrainer", SyncReplayOptimizer),
    ],
)
def test_trainers_build_their_optimizer(module: str, trainer: str, optimizer: type) -> None:
    import importlib

    cls = getattr(importlib.import_module(f"rayfield.rllib.agents.{module}"), trainer)
    t = cls(env="CartPole-v1", config={"num_workers": 0})
    try:
        assert type(t.optimizer) is optimizer and t.optimizer.workers is t.workers
        if optimizer is SyncReplayOptimizer:
            assert t.replay_buffer is t.optimizer.replay_buffers[DEFAULT_POLICY_ID]
            assert t.optimizer.config["buffer_size"] == t.config["buffer_size"]
        if optimizer is SyncSamplesOptimizer:
            assert t.optimizer.num_sgd_iter == 1  # PPO's epochs run in its policy
            assert t.optimizer.train_batch_size == t.config["train_batch_size"]
    finally:
        t.stop()
