from __future__ import annotations

import gymnasium as gym
import torch

from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.models.distributions import (
    Categorical,
    Deterministic,
    DiagGaussian,
    MultiCategorical,
)


def test_categorical_matches_torch() -> None:
    logits = torch.randn(5, 3)
    other = torch.randn(5, 3)
    d, ref = Categorical(logits), torch.distributions.Categorical(logits=logits)
    a = d.sample()
    assert a.shape == (5,)
    assert torch.allclose(d.logp(a), ref.log_prob(a))
    assert torch.allclose(d.entropy(), ref.entropy())
    ref_o = torch.distributions.Categorical(logits=other)
    assert torch.allclose(d.kl(Categorical(other)), torch.distributions.kl_divergence(ref, ref_o))
    assert torch.equal(d.deterministic_sample(), logits.argmax(-1))


def test_diag_gaussian_matches_torch() -> None:
    inputs = torch.randn(4, 6)
    mean, log_std = inputs[:, :3], inputs[:, 3:]
    d = DiagGaussian(inputs)
    ref = torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1)
    x = d.sample()
    assert torch.allclose(d.logp(x), ref.log_prob(x), atol=1e-5)
    assert torch.allclose(d.entropy(), ref.entropy(), atol=1e-5)
    other = torch.randn(4, 6)
    ref_o = torch.distributions.Independent(
        torch.distributions.Normal(other[:, :3], other[:, 3:].exp()), 1
    )
    assert torch.allclose(
        d.kl(DiagGaussian(other)), torch.distributions.kl_divergence(ref, ref_o), atol=1e-4
    )
    assert torch.equal(d.deterministic_sample(), mean)


def test_deterministic() -> None:
    x = torch.randn(2, 3)
    assert torch.equal(Deterministic(x).sample(), x)


def test_catalog_picks_distribution() -> None:
    assert ModelCatalog.get_action_dist(gym.spaces.Discrete(3), {}) == (Categorical, 3)
    assert ModelCatalog.get_action_dist(gym.spaces.Box(-1, 1, (2,)), {}) == (DiagGaussian, 4)
    assert ModelCatalog.get_action_dist(gym.spaces.Box(-1, 1, (2,)), {}, "deterministic") == (
        Deterministic,
        2,
    )


def test_multi_categorical() -> None:
    space = gym.spaces.MultiDiscrete([2, 3])
    cls, dim = ModelCatalog.get_action_dist(space, {})
    assert dim == 5 and issubclass(cls, MultiCategorical)
    logits = torch.randn(4, 5)
    d = cls(logits)
    a = d.sample()
    assert a.shape == (4, 2) and int(a[:, 1].max()) < 3
    ref0 = torch.distributions.Categorical(logits=logits[:, :2])
    ref1 = torch.distributions.Categorical(logits=logits[:, 2:])
    assert torch.allclose(d.logp(a), ref0.log_prob(a[:, 0]) + ref1.log_prob(a[:, 1]))
    assert torch.allclose(d.entropy(), ref0.entropy() + ref1.entropy())
    assert torch.allclose(d.kl(d), torch.zeros(4), atol=1e-6)


def test_categorical_samples_follow_the_probabilities() -> None:
    # the Gumbel-max draw: frequencies of 40,000 draws per row within 5 standard errors;
    # an action of probability 0 (logit -inf) is never drawn
    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    dist = Categorical(torch.log(probs).expand(20_000, 2, 3).reshape(40_000, 3))
    draws = dist.sample().reshape(20_000, 2)
    for row in range(2):
        freq = torch.bincount(draws[:, row], minlength=3).double() / 20_000
        se = torch.sqrt(probs[row].double() * (1 - probs[row].double()) / 20_000)
        assert torch.all((freq - probs[row].double()).abs() <= 5 * se + 1e-12), (row, freq)
    assert int((draws[:, 1] == 2).sum()) == 0
