from __future__ import annotations

import numpy as np
import pytest

from rayfield.rllib.utils.filter import MeanStdFilter, NoFilter, RunningStat, get_filter


def test_running_stat_matches_numpy() -> None:
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(500, 2))
    rs = RunningStat((2,))
    for chunk in np.split(x, 10):
        rs.push_batch(chunk)
    assert np.allclose(rs.mean, x.mean(0))
    assert np.allclose(rs.std, x.std(0, ddof=1))


def test_filter_normalises_and_clips() -> None:
    f = MeanStdFilter((1,), clip=2.0)
    x = np.random.default_rng(1).normal(5.0, 3.0, size=(1000, 1))
    y = f(x)
    assert abs(float(y.mean())) < 0.05 and abs(float(y.std()) - 1) < 0.05
    assert f(np.array([1e6]), update=False)[0] == 2.0


def test_merge_of_worker_buffers_equals_one_stream() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(100, 3)), rng.normal(2, 1, size=(50, 3))
    local, w1, w2 = MeanStdFilter((3,)), MeanStdFilter((3,)), MeanStdFilter((3,))
    w1(a)
    w2(b)
    local.apply_changes(w1)
    local.apply_changes(w2)
    both = np.concatenate([a, b])
    assert local.rs.n == 150
    assert np.allclose(local.rs.mean, both.mean(0))
    assert np.allclose(local.rs.std, both.std(0, ddof=1))
    restored = MeanStdFilter.from_dict(local.to_dict())
    assert np.allclose(restored.rs.mean, local.rs.mean)


def test_get_filter() -> None:
    assert isinstance(get_filter("NoFilter", (2,)), NoFilter)
    with pytest.raises(ValueError, match="MeanStdFilter"):
        get_filter("Mean", (2,))
