"""Ape-X's pure pieces: the per-worker epsilons, replay shards with priorities given by
the workers, the prioritized buffer's explicit priorities, the config checks, and the
public metrics helpers (`summarize_episodes`, `collect_metrics` on a local worker)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from rayfield.rllib.agents.dqn.apex import APEX_DEFAULT_CONFIG, ApexTrainer
from rayfield.rllib.agents.dqn.dqn import fixed_worker_exploration, per_worker_epsilon
from rayfield.rllib.evaluation import RolloutMetrics, collect_metrics, summarize_episodes
from rayfield.rllib.execution.replay_buffer import PrioritizedReplayBuffer
from rayfield.rllib.optimizers.async_replay_optimizer import ReplayShard
from rayfield.rllib.policy.sample_batch import SampleBatch


def rows(n: int, start: int = 0, priorities: Any = None) -> SampleBatch:
    batch = SampleBatch(
        obs=np.arange(start, start + n, dtype=np.float32)[:, None],
        actions=np.arange(start, start + n),
    )
    if priorities is not None:
        batch["priorities"] = np.asarray(priorities, dtype=np.float32)
    return batch


def test_per_worker_epsilons_follow_the_paper() -> None:
    # eps_i = 0.4 ** (1 + i / (N - 1) * 7), i = worker_index - 1
    eps = [per_worker_epsilon(w, 8) for w in range(1, 9)]
    assert eps[0] == pytest.approx(0.4)
    assert eps[-1] == pytest.approx(0.4**8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 3 / 7 * 7))
    assert all(a > b for a, b in itertools.pairwise(eps))
    assert per_worker_epsilon(1, 1) == pytest.approx(0.4)
    assert per_worker_epsilon(2, 2) == pytest.approx(0.4**8)
    with pytest.raises(ValueError, match=r"remote workers 1\.\.4"):
        per_worker_epsilon(0, 4)
    # only remote workers of a per-worker config get a fixed value
    cfg = {"per_worker_exploration": True, "num_workers": 3}
    assert fixed_worker_exploration({**cfg, "worker_index": 0}) is None
    assert fixed_worker_exploration({**cfg, "worker_index": 2}) == pytest.approx(0.4**4.5)
    assert (
        fixed_worker_exploration({**cfg, "per_worker_exploration": False, "worker_index": 2})
        is None
    )


def test_replay_shard_stores_worker_priorities_and_serves_after_learning_starts() -> None:
    shard = ReplayShard(8, learning_starts=4, alpha=1.0, beta=1.0, train_batch_size=1000, seed=0)
    assert shard.add_batch(rows(2, priorities=[1.0, 1.0])) == 2
    assert shard.replay() is None  # 2 rows < learning_starts
    shard.add_batch(rows(2, start=2, priorities=[1.0, 6.0]))
    batch = shard.replay()
    assert batch is not None and "priorities" not in batch
    # row 3 holds 6 / 9 of the priority mass
    assert 0.6 < float(np.mean(batch["actions"] == 3)) < 0.73
    assert batch["weights"].min() == pytest.approx(1 / 6, rel=1e-3)  # p_min / p_3
    shard.update_priorities(np.array([3]), np.array([1.0]))
    again = shard.replay()
    assert again is not None and 0.18 < float(np.mean(again["actions"] == 3)) < 0.32
    stats = shard.stats()
    assert (stats["num_added"], stats["num_sampled"], stats["size"]) == (4, 2000, 4)
    assert stats["num_priority_updates"] == 1


def test_uniform_shard_ignores_priorities() -> None:
    shard = ReplayShard(4, prioritized=False, train_batch_size=3, seed=0)
    shard.add_batch(rows(6, priorities=np.ones(6)))  # ring: rows 2..5 stay
    batch = shard.replay()
    assert batch is not None and set(batch["actions"].tolist()) <= {2, 3, 4, 5}
    shard.update_priorities(np.array([0]), np.array([5.0]))  # no effect, no error
    assert shard.stats()["num_priority_updates"] == 0


def test_prioritized_buffer_rejects_bad_priorities() -> None:
    buf = PrioritizedReplayBuffer(8, alpha=0.5, seed=0)
    with pytest.raises(ValueError, match="2 priorities for a batch of 3"):
        buf.add_batch(rows(3), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="finite and > 0"):
        buf.add_batch(rows(2), np.array([1.0, 0.0]))
    buf.add_batch(rows(2), np.array([4.0, 1.0]))
    buf.add_batch(rows(1, start=2))  # the largest priority seen: 4
    assert buf._sum[np.array([0, 2])].tolist() == pytest.approx([2.0, 2.0])


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"optimizer": {"num_replay_buffer_shards": 0}}, "num_replay_buffer_shards"),
        ({"optimizer": {"max_weight_sync_delay": 0}}, "max_weight_sync_delay"),
        ({"optimizer": {"replay_shards": 2}}, "unknown Ape-X optimizer key"),
        ({"buffer_size": 2, "optimizer": {"num_replay_buffer_shards": 4}}, "at least"),
        ({"multiagent": {"policies": {"a": (None, None, None, {})}}}, "one policy"),
    ],
)
def test_bad_apex_configs_say_what_to_fix(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ApexTrainer.merge_trainer_configs(APEX_DEFAULT_CONFIG, {**overrides, "env": "CartPole-v1"})


def test_apex_defaults_are_the_references() -> None:
    cfg = APEX_DEFAULT_CONFIG
    assert cfg["optimizer"] == {
        "max_weight_sync_delay": 400,
        "num_replay_buffer_shards": 4,
        "debug": False,
    }
    assert (cfg["n_step"], cfg["num_workers"], cfg["buffer_size"]) == (3, 32, 2000000)
    assert (cfg["learning_starts"], cfg["train_batch_size"], cfg["rollout_fragment_length"]) == (
        50000,
        512,
        50,
    )
    assert cfg["target_network_update_freq"] == 500000
    assert cfg["timesteps_per_iteration"] == 25000 and cfg["min_iter_time_s"] == 30
    assert cfg["per_worker_exploration"] and cfg["worker_side_prioritization"]


def test_summarize_episodes_counts_new_and_dropped() -> None:
    eps = [RolloutMetrics(10, 1.0), RolloutMetrics(20, 3.0), RolloutMetrics(30, 5.0)]
    out = summarize_episodes(eps, eps[2:], num_dropped=1)
    assert out["episode_reward_mean"] == pytest.approx(3.0)
    assert (out["episode_reward_min"], out["episode_reward_max"]) == (1.0, 5.0)
    assert out["episode_len_mean"] == pytest.approx(20.0)
    assert out["episodes_this_iter"] == 1 and out["num_metric_batches_dropped"] == 1
    assert out["hist_stats"]["episode_lengths"] == [10, 20, 30]
    empty = summarize_episodes([])
    assert np.isnan(empty["episode_reward_mean"]) and empty["episodes_this_iter"] == 0
    with pytest.raises(TypeError, match="RolloutMetrics"):
        summarize_episodes([{"episode_reward": 1.0}])  # type: ignore[list-item]


def test_collect_metrics_takes_a_local_workers_episodes() -> None:
    from rayfield.rllib.agents.pg import PGTrainer

    trainer = PGTrainer(
        env="CartPole-v1",
        config={
            "num_workers": 0,
            "rollout_fragment_length": 200,
            "batch_mode": "complete_episodes",
            "seed": 0,
        },
    )
    worker = trainer.workers.local_worker()
    try:
        batch = worker.sample()
        out = collect_metrics(worker)
        assert out["episodes_this_iter"] >= 1
        assert sum(out["hist_stats"]["episode_lengths"]) == batch.count
        assert out["episode_reward_mean"] == pytest.approx(
            np.mean(out["hist_stats"]["episode_reward"])
        )
        assert out["off_policy_estimator"] == {}
        assert collect_metrics(worker)["episodes_this_iter"] == 0  # taken once
    finally:
        trainer.stop()
