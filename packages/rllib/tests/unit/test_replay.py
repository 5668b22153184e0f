from __future__ import annotations

import numpy as np
import pytest

from rayfield.rllib.agents.dqn.dqn import adjust_nstep
from rayfield.rllib.execution.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from rayfield.rllib.execution.segment_tree import MinSegmentTree, SumSegmentTree
from rayfield.rllib.policy.sample_batch import SampleBatch


def rows(start: int, n: int) -> SampleBatch:
    return SampleBatch(
        obs=np.arange(start, start + n, dtype=np.float32)[:, None],
        actions=np.arange(start, start + n),
    )


def test_segment_trees() -> None:
    s, m = SumSegmentTree(8), MinSegmentTree(8)
    vals = np.array([1.0, 2.0, 3.0, 4.0, 0.5])
    s[np.arange(5)] = vals
    m[np.arange(5)] = vals
    assert s.sum() == pytest.approx(10.5) and m.min() == 0.5
    assert s.find_prefixsum_idx(np.array([0.0, 0.99, 1.0, 2.9, 3.1, 10.2])).tolist() == [
        0,
        0,
        1,
        1,
        2,
        4,
    ]
    s[np.array([1, 1])] = np.array([5.0, 5.0])
    assert s.sum() == pytest.approx(13.5)
    with pytest.raises(ValueError):
        SumSegmentTree(6)


def test_ring_buffer_overwrites_oldest() -> None:
    buf = ReplayBuffer(4, seed=0)
    buf.add_batch(rows(0, 3))
    buf.add_batch(rows(3, 3))
    assert len(buf) == 4
    sample = buf.sample(100)
    assert set(sample["actions"].tolist()) == {2, 3, 4, 5}
    assert np.array_equal(sample["obs"][:, 0], sample["actions"].astype(np.float32))
    with pytest.raises(ValueError):
        ReplayBuffer(4).sample(1)


def test_prioritized_sampling_follows_priorities() -> None:
    buf = PrioritizedReplayBuffer(4, alpha=1.0, seed=0)
    buf.add_batch(rows(0, 4))
    buf.update_priorities(np.arange(4), np.array([1.0, 1.0, 1.0, 7.0]))
    s = buf.sample(10000, beta=1.0)
    frac = float(np.mean(s["actions"] == 3))
    assert 0.65 < frac < 0.75
    w = s["weights"]
    assert w.max() == pytest.approx(1.0)
    # weight ~ 1/P: the frequent row gets the smallest weight, 1/7 of the others
    assert w[s["actions"] == 3][0] == pytest.approx(1 / 7, rel=1e-4)
    with pytest.raises(ValueError):
        buf.update_priorities(np.array([0]), np.array([0.0]))


def test_nstep() -> None:
    b = SampleBatch(
        rewards=np.array([1.0, 2.0, 3.0]),
        new_obs=np.array([[1.0], [2.0], [3.0]]),
        terminateds=np.array([False, False, True]),
    )
    out = adjust_nstep(b, 2, 0.5)
    assert out["rewards"].tolist() == [2.0, 3.5, 3.0]
    assert out["new_obs"][:, 0].tolist() == [2.0, 3.0, 3.0]
    assert out["terminateds"].tolist() == [False, True, True]
    assert out["discounts"].tolist() == [0.25, 0.25, 0.5]
