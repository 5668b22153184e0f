"""APPO's loss with V-trace (`APPOTorchPolicy`): the surrogate's ratio and the V-trace
targets are taken against the target network (IMPACT, RLlib's APPO), the target follows
the learning network every ``target_network_update_freq * num_sgd_iter *
minibatch_buffer_size`` updates, and the KL coefficient adapts. No processes."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rayfield.rllib.agents.ppo.appo import DEFAULT_CONFIG
from rayfield.rllib.agents.ppo.appo_torch_policy import APPOTorchPolicy
from rayfield.rllib.evaluation.rollout_worker import RolloutWorker
from rayfield.rllib.policy.sample_batch import SampleBatch


def make_worker(**overrides: Any) -> RolloutWorker:
    config = copy.deepcopy(DEFAULT_CONFIG)
    config.update(
        {
            "vtrace": True,
            "rollout_fragment_length": 10,
            "num_envs_per_worker": 2,
            "model": {"fcnet_hiddens": [16]},
            "seed": 0,
            **overrides,
        }
    )
    return RolloutWorker(lambda ctx: gym.make("CartPole-v1"), APPOTorchPolicy, config)


def params(model: torch.nn.Module) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in model.parameters()]


def test_the_target_network_follows_after_each_batchs_passes() -> None:
    worker = make_worker(num_sgd_iter=2, minibatch_buffer_size=1, target_network_update_freq=1)
    policy: APPOTorchPolicy = worker.policy
    assert policy.target_update_period() == 2
    batch = worker.sample()
    start = params(policy.model)
    policy.learn_on_batch(batch)
    target = policy.target_model
    assert target is not None
    # after one update the target still holds the weights from before it
    for a, b in zip(params(target), start):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(params(policy.model), start))
    stats = policy.learn_on_batch(batch)
    assert stats["num_target_updates"] == 1
    for a, b in zip(params(target), params(policy.model)):
        np.testing.assert_array_equal(a, b)
    assert not any(p.requires_grad for p in target.parameters())


def test_the_ratio_is_against_the_target_so_stale_steps_still_move_the_policy() -> None:
    worker = make_worker(clip_param=0.2, entropy_coeff=0.0, vf_loss_coeff=0.0)
    policy: APPOTorchPolicy = worker.policy
    batch = worker.sample()
    # a stale behaviour policy: every recorded action was 3x less likely under mu than now
    stale = batch.copy()
    stale[SampleBatch.ACTION_LOGP] = batch[SampleBatch.ACTION_LOGP] - np.log(3.0)
    tensors = policy.to_tensors(stale)
    policy.loss(policy.model, policy.dist_class, tensors)
    # mu / pi_old = 1/3 is not clipped (target_worker_clipping 2) and pi = pi_old, so
    # r = (1/3) * 3 = 1: inside the clip range, the gradient is not cut
    np.testing.assert_allclose(float(policy.stats["mean_is_ratio"]), 1 / 3, rtol=1e-5)
    np.testing.assert_allclose(float(policy.stats["mean_rho"]), 3.0, rtol=1e-5)
    # every pi / mu = 3 is above rho_bar = 1; mean(log mu - log pi) = -log 3
    assert float(policy.stats["rho_clip_frac"]) == 1.0
    np.testing.assert_allclose(float(policy.stats["behaviour_kl"]), -np.log(3.0), rtol=1e-5)
    loss = policy.loss(policy.model, policy.dist_class, tensors)
    policy.model.zero_grad()
    loss.backward()
    grads = [p.grad for p in policy.model._logits.parameters()]
    assert all(g is not None and float(g.abs().sum()) > 0 for g in grads)


def test_the_kl_coefficient_adapts_at_target_updates() -> None:
    worker = make_worker(use_kl_loss=True, kl_coeff=1.0, kl_target=0.01, lr=0.05)
    policy: APPOTorchPolicy = worker.policy
    batch = worker.sample()
    policy._last_kl = 1.0
    policy._adapt_kl_coeff()
    assert policy.kl_coeff == pytest.approx(1.5)
    policy._last_kl = 0.0
    policy._adapt_kl_coeff()
    assert policy.kl_coeff == pytest.approx(0.75)
    stats = policy.learn_on_batch(batch)
    assert stats["kl_coeff"] == policy.kl_coeff
    assert "kl" in stats and stats["kl"] >= 0.0


def test_set_weights_restarts_the_target_from_them() -> None:
    worker = make_worker()
    policy: APPOTorchPolicy = worker.policy
    policy.learn_on_batch(worker.sample())
    weights = {k: np.zeros_like(v) for k, v in policy.get_weights().items()}
    policy.set_weights(weights)
    assert policy.target_model is not None
    for p in policy.target_model.parameters():
        assert float(p.abs().sum()) == 0.0


def test_without_vtrace_gae_and_the_behaviour_policy_replace_the_target() -> None:
    worker = make_worker(vtrace=False, use_kl_loss=True)
    policy: APPOTorchPolicy = worker.policy
    assert policy.target_model is None  # no target network without V-trace
    batch = worker.sample()
    assert {"vf_preds", "advantages", "value_targets"} <= set(batch.keys())
    stats = policy.learn_on_batch(batch)
    # the first update's KL is against the behaviour policy, which the learner still is
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    assert stats["mean_is_ratio"] == 1.0
    assert np.isfinite(stats["total_loss"])


def test_impala_workers_record_no_value_predictions() -> None:
    from rayfield.rllib.agents.impala.impala import DEFAULT_CONFIG as IMPALA_CONFIG
    from rayfield.rllib.agents.impala.vtrace_torch_policy import VTraceTorchPolicy

    config = {**copy.deepcopy(IMPALA_CONFIG), "rollout_fragment_length": 5, "seed": 0}
    worker = RolloutWorker(lambda ctx: gym.make("CartPole-v1"), VTraceTorchPolicy, config)
    batch = worker.sample()
    assert "vf_preds" not in batch and "action_logp" in batch
