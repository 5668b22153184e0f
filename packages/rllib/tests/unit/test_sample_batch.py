from __future__ import annotations

import numpy as np
import pytest

from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch


def make(n: int, start: int = 0, eps: list[int] | None = None) -> SampleBatch:
    return SampleBatch(
        obs=np.arange(start, start + n, dtype=np.float32)[:, None].repeat(3, 1),
        actions=np.arange(start, start + n),
        eps_id=np.array(eps if eps is not None else [0] * n),
    )


def test_columns_are_numpy_and_count() -> None:
    b = SampleBatch(obs=[[1, 2], [3, 4]], rewards=[1.0, 2.0])
    assert isinstance(b["obs"], np.ndarray) and b["obs"].shape == (2, 2)
    assert b.count == len(b) == 2


def test_unequal_columns_raise() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        SampleBatch(obs=np.zeros(3), rewards=np.zeros(2))
    b = make(3)
    with pytest.raises(ValueError, match="rows"):
        b["x"] = np.zeros(4)


def test_concat_and_mismatched_columns() -> None:
    out = SampleBatch.concat_samples([make(2), make(3, start=2)])
    assert out.count == 5
    assert out["actions"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="columns"):
        SampleBatch.concat_samples([make(2), SampleBatch(obs=np.zeros((1, 3)))])


def test_shuffle_keeps_rows_together() -> None:
    b = make(50)
    b.shuffle(np.random.default_rng(0))
    assert b["actions"].tolist() != list(range(50))
    assert np.array_equal(b["obs"][:, 0], b["actions"].astype(np.float32))


def test_minibatches_cover_every_row_once() -> None:
    b = make(10)
    mbs = list(b.minibatches(4, rng=np.random.default_rng(1)))
    assert [m.count for m in mbs] == [4, 4, 2]
    seen = np.concatenate([m["actions"] for m in mbs])
    assert sorted(seen.tolist()) == list(range(10))
    for m in mbs:
        assert np.array_equal(m["obs"][:, 0], m["actions"].astype(np.float32))
    with pytest.raises(ValueError):
        list(b.minibatches(0))


def test_split_by_episode() -> None:
    b = make(6, eps=[7, 7, 8, 8, 8, 9])
    parts = b.split_by_episode()
    assert [p.count for p in parts] == [2, 3, 1]
    assert [int(p["eps_id"][0]) for p in parts] == [7, 8, 9]


def test_multi_agent_batch() -> None:
    single = MultiAgentBatch.wrap_as_needed({DEFAULT_POLICY_ID: make(2)}, 2)
    assert isinstance(single, SampleBatch)
    ma = MultiAgentBatch({"a": make(2), "b": make(3)}, count=3)
    both = SampleBatch.concat_samples([ma, MultiAgentBatch({"a": make(1)}, 1)])
    assert isinstance(both, MultiAgentBatch)
    assert both.count == 4
    assert both.policy_batches["a"].count == 3
    assert both.total() == 6
