"""The Dirichlet action distribution and the Simplex space: log-density, entropy and KL
against scipy and torch.distributions, sampling on the simplex, and the catalog's
choice of it for Simplex actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from scipy import special, stats

from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.models.distributions import Dirichlet
from rayfield.rllib.models.preprocessors import get_preprocessor
from rayfield.rllib.utils.spaces import Simplex


def alphas(inputs: torch.Tensor) -> np.ndarray:
    return (inputs.exp() + Dirichlet.EPS).double().numpy()


def test_logp_and_entropy_match_scipy() -> None:
    torch.manual_seed(0)
    inputs = torch.randn(6, 4, dtype=torch.float64)
    d = Dirichlet(inputs)
    x = d.sample()
    assert x.shape == (6, 4)
    assert torch.allclose(x.sum(-1), torch.ones(6, dtype=torch.float64)) and (x >= 0).all()
    a = alphas(inputs)
    want_logp = [stats.dirichlet.logpdf(x[i].numpy(), a[i]) for i in range(6)]
    np.testing.assert_allclose(d.logp(x).numpy(), want_logp, rtol=1e-6)
    want_h = [stats.dirichlet.entropy(a[i]) for i in range(6)]
    np.testing.assert_allclose(d.entropy().numpy(), want_h, rtol=1e-6)


def test_kl_matches_the_closed_form_and_torch() -> None:
    torch.manual_seed(1)
    p_in, q_in = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    kl = Dirichlet(p_in).kl(Dirichlet(q_in)).numpy()
    a, b = alphas(p_in), alphas(q_in)
    a0, b0 = a.sum(-1), b.sum(-1)
    # KL(Dir(a) || Dir(b)), written out with scipy's log-gamma and digamma
    want = (
        special.gammaln(a0)
        - special.gammaln(a).sum(-1)
        - special.gammaln(b0)
        + special.gammaln(b).sum(-1)
        + ((a - b) * (special.digamma(a) - special.digamma(a0)[:, None])).sum(-1)
    )
    np.testing.assert_allclose(kl, want, rtol=1e-6)
    ref = torch.distributions.kl_divergence(
        torch.distributions.Dirichlet(torch.as_tensor(a)),
        torch.distributions.Dirichlet(torch.as_tensor(b)),
    )
    np.testing.assert_allclose(kl, ref.numpy(), rtol=1e-6)
    assert np.allclose(Dirichlet(p_in).kl(Dirichlet(p_in)).numpy(), 0.0, atol=1e-9)


def test_logp_of_edge_actions_is_finite_and_has_gradients() -> None:
    inputs = torch.zeros(2, 3, requires_grad=True)
    d = Dirichlet(inputs)
    edge = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    logp = d.logp(edge)
    assert torch.isfinite(logp).all()
    logp.sum().backward()
    assert inputs.grad is not None and torch.isfinite(inputs.grad).all()
    # alpha = 1 everywhere: uniform on the 2-simplex, density Gamma(3) = 2
    inner = torch.tensor([[0.2, 0.3, 0.5]])
    assert Dirichlet(torch.zeros(1, 3)).logp(inner).item() == pytest.approx(np.log(2.0), abs=1e-5)


def test_deterministic_sample_is_the_mean() -> None:
    inputs = torch.log(torch.tensor([[1.0, 2.0, 7.0]]))
    mean = Dirichlet(inputs).deterministic_sample()
    assert torch.allclose(mean, torch.tensor([[0.1, 0.2, 0.7]]), atol=1e-6)
    torch.manual_seed(2)
    draws = Dirichlet(inputs.expand(20000, 3)).sample()
    assert torch.allclose(draws.mean(0), mean[0], atol=0.01)


def test_the_catalog_picks_dirichlet_for_simplex_actions() -> None:
    space = Simplex((4,))
    cls, width = ModelCatalog.get_action_dist(space, {})
    assert cls is Dirichlet and width == 4
    box = gym.spaces.Box(0.0, 1.0, (3,))
    assert ModelCatalog.get_action_dist(box, {}, dist_type="dirichlet") == (Dirichlet, 3)
    with pytest.raises(ValueError, match="needs a Simplex"):
        ModelCatalog.get_action_dist(gym.spaces.Discrete(3), {}, dist_type="dirichlet")
    assert get_preprocessor(space)(space).shape == (4,)


def test_simplex_space() -> None:
    space = Simplex((2, 3), concentration=[1.0, 2.0, 3.0], seed=0)
    x = space.sample()
    assert x.shape == (2, 3) and x.dtype == np.float32 and space.contains(x)
    assert not space.contains(np.array([[0.5, 0.5, 0.5]] * 2))
    assert not space.contains(np.array([[1.5, -0.5, 0.0]] * 2))
    assert space == Simplex((2, 3), concentration=[1.0, 2.0, 3.0]) != Simplex((2, 3))
    with pytest.raises(ValueError, match="3 positive numbers"):
        Simplex((3,), concentration=[1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="last axis"):
        Simplex(())
