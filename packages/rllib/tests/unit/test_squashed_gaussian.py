"""`SquashedGaussian`: tanh-squashed diagonal Gaussian over a bounded Box, and its
selection by `ModelCatalog.get_action_dist`."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.models.distributions import DiagGaussian, SquashedGaussian

LOW = np.array([-2.0, 0.0, 10.0])
HIGH = np.array([2.0, 1.0, 13.0])


def make(inputs: torch.Tensor) -> SquashedGaussian:
    return SquashedGaussian(inputs, low=LOW, high=HIGH)


def reference_logp(inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The change of variables written out in float64: u = atanh(2 (a - low) /
    (high - low) - 1), log pi(a) = log N(u) - sum log(1 - tanh(u)^2) - sum log((high -
    low) / 2)."""
    inputs, actions = inputs.double(), actions.double()
    mean, log_std = inputs.chunk(2, dim=-1)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    y = 2 * (actions - low) / (high - low) - 1
    u = torch.atanh(y)
    log_normal = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    return (log_normal - torch.log(1 - y**2) - torch.log((high - low) / 2)).sum(-1)


def test_logp_matches_change_of_variables() -> None:
    torch.manual_seed(0)
    # float64, |u| <= ~10 so that tanh(u) stays below 1.
    inputs = torch.cat([torch.randn(64, 3), torch.rand(64, 3) * 2 - 1.5], -1).double()
    d = make(inputs)
    a = d.sample()
    assert a.shape == (64, 3) and a.dtype == torch.float64
    ref = reference_logp(inputs, a)
    assert torch.allclose(d.logp(a), ref, atol=1e-6)
    mean, log_std = inputs.chunk(2, dim=-1)
    tanh_affine = torch.distributions.TransformedDistribution(
        torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1),
        [
            torch.distributions.TanhTransform(),
            torch.distributions.AffineTransform(
                torch.tensor((LOW + HIGH) / 2), torch.tensor((HIGH - LOW) / 2), event_dim=1
            ),
        ],
    )
    assert torch.allclose(tanh_affine.log_prob(a), ref, atol=1e-6)
    # float32 away from saturation; sampled_action_logp is logp of the sample.
    inner = make(torch.cat([0.3 * torch.randn(64, 3), torch.full((64, 3), -1.0)], -1))
    a32 = inner.sample()
    ref32 = reference_logp(inner.inputs, a32)
    assert torch.allclose(inner.logp(a32).double(), ref32, atol=1e-4)
    assert torch.allclose(inner.sampled_action_logp().double(), ref32, atol=1e-4)


def test_logp_integrates_to_one() -> None:
    # Numerical integral of pi(a) over a 1-D Box [0.5, 3] (trapezoid, float64).
    inputs = torch.tensor([[0.7, math.log(0.8)]], dtype=torch.float64)
    d = SquashedGaussian(inputs, low=[0.5], high=[3.0])
    grid = torch.linspace(0.5, 3.0, 200_001, dtype=torch.float64)[1:-1, None]
    density = d.logp(grid).exp()
    assert float(torch.trapezoid(density, grid[:, 0])) == pytest.approx(1.0, abs=1e-4)


def test_samples_inside_bounds_even_when_saturated() -> None:
    torch.manual_seed(1)
    inputs = torch.cat([20 * torch.randn(5000, 3), torch.full((5000, 3), 2.0)], -1)
    a = make(inputs).sample()
    low, high = torch.tensor(LOW, dtype=a.dtype), torch.tensor(HIGH, dtype=a.dtype)
    assert bool(((a >= low) & (a <= high)).all())
    assert bool(((a == low) | (a == high)).any())  # saturation reaches the bounds


def test_deterministic_sample_is_squashed_mean() -> None:
    inputs = torch.randn(8, 6)
    mean = inputs[:, :3]
    expected = torch.tensor(LOW) + (torch.tanh(mean.double()) + 1) / 2 * torch.tensor(HIGH - LOW)
    assert torch.allclose(make(inputs).deterministic_sample().double(), expected, atol=1e-5)


def test_kl_is_gaussian_kl() -> None:
    a, b = torch.randn(10, 6), torch.randn(10, 6)
    assert torch.allclose(make(a).kl(make(b)), DiagGaussian(a).kl(DiagGaussian(b)), atol=1e-4)
    assert torch.allclose(make(a).kl(make(a)), torch.zeros(10), atol=1e-6)
    other_bounds = SquashedGaussian(b, low=LOW, high=HIGH + 1)
    with pytest.raises(ValueError, match="same bounds"):
        make(a).kl(other_bounds)


def test_entropy_is_a_one_sample_estimate() -> None:
    torch.manual_seed(2)
    inputs = torch.tensor([[0.7, math.log(0.8)]], dtype=torch.float64)
    ent = SquashedGaussian(inputs.expand(100_000, 2), low=[0.5], high=[3.0]).entropy()
    assert ent.shape == (100_000,) and bool(torch.isfinite(ent).all())
    # Its mean estimates the entropy -integral pi log pi (trapezoid on a 1-D grid).
    grid = torch.linspace(0.5, 3.0, 200_001, dtype=torch.float64)[1:-1, None]
    logp = SquashedGaussian(inputs, low=[0.5], high=[3.0]).logp(grid)
    exact = -float(torch.trapezoid(logp.exp() * logp, grid[:, 0]))
    assert float(ent.mean()) == pytest.approx(exact, abs=0.02)


def test_sample_is_reparameterised() -> None:
    inputs = torch.randn(4, 6, requires_grad=True)
    d = make(inputs)
    (d.sample().sum() + d.sampled_action_logp().sum()).backward()
    assert inputs.grad is not None
    assert bool((inputs.grad[:, :3] != 0).all())  # through the means
    assert bool(torch.isfinite(inputs.grad).all())


def test_boundary_actions_have_finite_logp() -> None:
    inputs = torch.randn(2, 6, requires_grad=True)
    actions = torch.tensor(np.stack([LOW, HIGH]), dtype=torch.float32)
    logp = make(inputs).logp(actions)
    assert bool(torch.isfinite(logp).all())
    logp.sum().backward()
    assert bool(torch.isfinite(inputs.grad).all())
    beyond = torch.tensor(np.stack([LOW - 1e-3, HIGH + 1e-3]), dtype=torch.float32)
    assert bool(torch.isfinite(make(inputs).logp(beyond)).all())


def test_bounds_errors() -> None:
    with pytest.raises(ValueError, match="finite bounds"):
        SquashedGaussian(torch.zeros(1, 2), low=[-np.inf], high=[1.0])
    with pytest.raises(ValueError, match="low < high"):
        SquashedGaussian(torch.zeros(1, 2), low=[1.0], high=[1.0])
    with pytest.raises(ValueError, match="bounds"):
        SquashedGaussian(torch.zeros(1, 2))


def test_catalog_selects_squashed_gaussian() -> None:
    box = gym.spaces.Box(np.float32([-1.0, 0.0]), np.float32([1.0, 5.0]))
    for args in [({}, "squashed_gaussian"), ({"squash_to_range": True}, None)]:
        cls, width = ModelCatalog.get_action_dist(box, *args)
        assert issubclass(cls, SquashedGaussian) and width == 4
        assert cls.low == (-1.0, 0.0) and cls.high == (1.0, 5.0)
        a = cls(torch.zeros(3, 4)).deterministic_sample()
        assert torch.allclose(a, torch.tensor([[0.0, 2.5]] * 3))
    assert ModelCatalog.get_action_dist(box, {"squash_to_range": False})[0] is DiagGaussian
    # squash_to_range only concerns Box spaces.
    assert ModelCatalog.get_action_dist(gym.spaces.Discrete(3), {"squash_to_range": True})[1] == 3
    with pytest.raises(ValueError, match="needs a Box"):
        ModelCatalog.get_action_dist(gym.spaces.Discrete(3), {}, "squashed_gaussian")


def test_catalog_rejects_unbounded_box() -> None:
    box = gym.spaces.Box(np.float32([-1.0, -np.inf]), np.float32([np.inf, np.inf]))
    with pytest.raises(ValueError, match=r"low is infinite at indices \[1\] and high at \[0, 1\]"):
        ModelCatalog.get_action_dist(box, {"squash_to_range": True})
    with pytest.raises(ValueError, match="finite"):
        ModelCatalog.get_action_dist(box, {}, "squashed_gaussian")
