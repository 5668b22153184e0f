from __future__ import annotations

import numpy as np

from rayfield.rllib.evaluation.postprocessing import compute_advantages, discount
from rayfield.rllib.policy.sample_batch import SampleBatch


def test_discount() -> None:
    assert np.allclose(discount(np.array([1.0, 1.0, 1.0]), 0.5), [1.75, 1.5, 1.0])


def test_gae_matches_definition() -> None:
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=6), rng.normal(size=6)
    gamma, lam, last_r = 0.9, 0.8, 0.7
    b = compute_advantages(SampleBatch(rewards=r, vf_preds=v), last_r, gamma, lam)
    vn = np.append(v, last_r)
    delta = r + gamma * vn[1:] - vn[:-1]
    expected = [sum((gamma * lam) ** k * delta[t + k] for k in range(6 - t)) for t in range(6)]
    assert np.allclose(b["advantages"], expected, atol=1e-5)
    assert np.allclose(b["value_targets"], np.array(expected) + v, atol=1e-5)
    assert b["advantages"].dtype == np.float32


def test_gae_with_lambda_one_is_return_minus_value() -> None:
    r, v = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.1, 0.2])
    b = compute_advantages(SampleBatch(rewards=r, vf_preds=v), 0.0, 0.9, 1.0)
    returns = discount(r, 0.9)
    assert np.allclose(b["advantages"], returns - v, atol=1e-5)


def test_without_gae() -> None:
    b = compute_advantages(
        SampleBatch(rewards=[1.0, 1.0]), 2.0, 0.5, use_gae=False, use_critic=False
    )
    assert np.allclose(b["advantages"], [1.0 + 0.5 + 0.5, 1.0 + 1.0])
    assert np.allclose(b["value_targets"], 0.0)
