"""The pure pieces of ES and ARS: the centered rank transform, the shared noise table's
slices, Adam on a flat vector, and the numpy policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.es.es_worker import FlatPolicy
from rayfield.rllib.agents.es.noise import Adam, SharedNoiseTable, centered_ranks, make_noise


def test_centered_ranks_span_minus_half_to_half_by_rank() -> None:
    x = np.array([[10.0, -3.0], [0.5, 7.0]])
    np.testing.assert_allclose(centered_ranks(x), [[0.5, -0.5], [-1 / 6, 1 / 6]])
    assert centered_ranks(np.array([4.0])).tolist() == [0.0]
    big = centered_ranks(np.random.default_rng(0).normal(size=101))
    assert big.min() == -0.5 and big.max() == 0.5 and abs(big.sum()) < 1e-12


def test_noise_table_slices_and_offsets() -> None:
    noise = make_noise(1000, seed=3)
    assert noise.dtype == np.float32 and abs(noise.mean()) < 0.1
    np.testing.assert_array_equal(noise, make_noise(1000, seed=3))
    table = SharedNoiseTable(noise)
    rng = np.random.default_rng(0)
    offsets = [table.sample_index(rng, 990) for _ in range(200)]
    assert min(offsets) >= 0 and max(offsets) <= 10
    assert np.shares_memory(table.get(5, 10), noise)
    with pytest.raises(ValueError, match="noise_size"):
        table.sample_index(rng, 1001)


def test_adam_ascends_a_concave_function() -> None:
    adam = Adam(2, stepsize=0.1)
    theta = np.array([3.0, -2.0])
    for _ in range(500):
        theta = adam.step(theta, -2 * (theta - np.array([1.0, 0.5])))  # grad of -|x - c|^2
    np.testing.assert_allclose(theta, [1.0, 0.5], atol=0.05)


def test_flat_policy_linear_and_mlp() -> None:
    lin = FlatPolicy(3, gym.spaces.Discrete(2), [], bias=False)
    assert lin.num_params == 6
    lin.set_flat(np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0]))  # W[obs, action], row-major
    assert lin.compute(np.array([0.0, 2.0, 0.0])) == 1
    assert lin.compute(np.array([2.0, 0.0, 0.0])) == 0
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    mlp = FlatPolicy(4, box, [8], bias=True)
    assert mlp.num_params == 4 * 8 + 8 + 8 * 2 + 2
    mlp.set_flat(mlp.initial_params(np.random.default_rng(0)) * 1000)
    action = mlp.compute(np.ones(4))
    assert action.shape == (2,) and np.all(np.abs(action) <= 1.0)
    with pytest.raises(TypeError, match="Discrete or Box"):
        FlatPolicy(4, gym.spaces.MultiBinary(3), [], bias=False)
