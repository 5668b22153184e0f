"""Action distributions over the model's outputs (torch).

Each takes the model's output tensor (float32[B, num_outputs]) and offers
``sample``, ``deterministic_sample``, ``logp(actions)``, ``entropy`` and
``kl(other)``, all batched (one value per row). Most use torch ops directly rather
than ``torch.distributions`` to keep the per-step sampling path short;
`SquashedGaussian` builds on ``torch.distributions``' tanh change of variables.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.distributions import (
    AffineTransform,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
    kl_divergence,
)


class ActionDistribution:
    """Base class.

    Args:
        inputs: float32[B, num_outputs], the model's outputs.
        model: the model that produced them (unused by the built-in ones).
    """

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:
        self.inputs = inputs
        self.model = model
        self.last_sample: torch.Tensor | None = None

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def deterministic_sample(self) -> torch.Tensor:
        raise NotImplementedError

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        raise NotImplementedError

    def sampled_action_logp(self) -> torch.Tensor:
        """Log-probability of the last `sample()`."""
        assert self.last_sample is not None, "call sample() first"
        return self.logp(self.last_sample)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        raise NotImplementedError


class Categorical(ActionDistribution):
    """A categorical distribution over Discrete(n) actions from n logits."""

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:
        super().__init__(inputs, model)
        self.log_probs = torch.log_softmax(inputs, dim=-1)

    def sample(self) -> torch.Tensor:
        """An action per row, drawn with the Gumbel-max trick: ``argmax(log p + G)`` with
        ``G = -log(-log U)``, ``U ~ Uniform[0, 1)``, which has the law of ``p`` (Gumbel
        1954; Maddison et al. 2014, "A* Sampling", section 2); a few elementwise ops,
        where ``torch.multinomial`` costs about as much as a small policy's forward pass
        on one row. ``U = 0`` gives ``G = -inf``: that row's draw is not that action."""
        noise = torch.rand_like(self.log_probs).log_().neg_().log_()  # -G
        self.last_sample = (self.log_probs - noise).argmax(dim=-1)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = self.inputs.argmax(dim=-1)
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_probs.gather(-1, x.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.log_probs.exp() * self.log_probs).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, Categorical)
        return (self.log_probs.exp() * (self.log_probs - other.log_probs)).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(action_space.n)


class MultiCategorical(ActionDistribution):
    """Independent categoricals over MultiDiscrete([n1, n2, ...]) actions; the inputs
    are the concatenated logits (n1 + n2 + ... columns), actions are int[B, k]."""

    input_lens: tuple[int, ...] | None = None  # set by ModelCatalog for a space

    def __init__(self, inputs: torch.Tensor, model: Any = None, input_lens: Any = None) -> None:
        super().__init__(inputs, model)
        input_lens = input_lens or self.input_lens
        if input_lens is None:
            raise ValueError("MultiCategorical needs the sizes of its parts (input_lens)")
        self.cats = [Categorical(x) for x in torch.split(inputs, list(input_lens), dim=-1)]

    def sample(self) -> torch.Tensor:
        self.last_sample = torch.stack([c.sample() for c in self.cats], dim=-1)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = torch.stack([c.deterministic_sample() for c in self.cats], dim=-1)
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([c.logp(x[..., i]) for i, c in enumerate(self.cats)], -1).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([c.entropy() for c in self.cats], dim=-1).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, MultiCategorical)
        return torch.stack([a.kl(b) for a, b in zip(self.cats, other.cats)], -1).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(np.sum(action_space.nvec))


class DiagGaussian(ActionDistribution):
    """A Gaussian with diagonal covariance: the first half of the inputs are the
    means, the second half the log standard deviations."""

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:
        super().__init__(inputs, model)
        self.mean, self.log_std = torch.chunk(inputs, 2, dim=-1)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        self.last_sample = self.mean + self.std * torch.randn_like(self.mean)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = self.mean
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / self.std
        return (
            -0.5 * (z**2).sum(-1) - self.log_std.sum(-1) - 0.5 * math.log(2 * math.pi) * x.shape[-1]
        )

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, DiagGaussian)
        return (
            other.log_std
            - self.log_std
            + (self.std**2 + (self.mean - other.mean) ** 2) / (2.0 * other.std**2)
            - 0.5
        ).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(np.prod(action_space.shape)) * 2


class Deterministic(ActionDistribution):
    """The inputs themselves as the action (a Gaussian with zero variance)."""

    def sample(self) -> torch.Tensor:
        self.last_sample = self.inputs
        return self.inputs

    def deterministic_sample(self) -> torch.Tensor:
        return self.sample()

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], dtype=self.inputs.dtype)

    def entropy(self) -> torch.Tensor:
        return torch.zeros(self.inputs.shape[0], dtype=self.inputs.dtype)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        return torch.zeros(self.inputs.shape[0], dtype=self.inputs.dtype)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(np.prod(action_space.shape))


class SquashedGaussian(ActionDistribution):
    """A diagonal Gaussian squashed by tanh into a bounded Box (SAC's policy
    distribution: Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum
    Entropy Deep Reinforcement Learning with a Stochastic Actor", Appendix C).

    A Gaussian sample ``u`` becomes the action
    ``a = low + (tanh(u) + 1) / 2 * (high - low)``, inside ``[low, high]``. By the
    change of variables (the paper's Appendix C, plus the affine scale's log-determinant),
    ``log pi(a) = log N(u) - sum log(1 - tanh(u)^2) - sum log((high - low) / 2)``;
    ``torch.distributions``' ``TanhTransform`` computes the tanh term in a stable form.

    The inputs are laid out as for `DiagGaussian`: float32[B, 2k], the k means of
    ``u`` then its k log standard deviations (in the units of ``u``, before the
    squash). Actions are float[B, k] in the Box's units.

    Args:
        inputs: float32[B, 2k], the model's outputs.
        model: unused.
        low, high: the Box's bounds, k values each (default: the class attributes,
            which `ModelCatalog.get_action_dist` sets for a space).

    Raises:
        ValueError: no bounds, a bound that is not finite, or ``low >= high``.
    """

    low: tuple[float, ...] | None = None  # set by ModelCatalog for a space
    high: tuple[float, ...] | None = None

    def __init__(
        self, inputs: torch.Tensor, model: Any = None, low: Any = None, high: Any = None
    ) -> None:
        super().__init__(inputs, model)
        low, high = self.check_bounds(
            self.low if low is None else low, self.high if high is None else high
        )
        self.mean, self.log_std = torch.chunk(inputs, 2, dim=-1)
        # The base Gaussian over u, and u -> tanh(u) on top of it (cache_size=1: the
        # log-probability of a fresh sample reuses its u instead of atanh).
        # validate_args=False: no per-step argument checks, as in the other classes.
        self.gaussian = Independent(Normal(self.mean, self.log_std.exp(), validate_args=False), 1)
        self.tanh_gaussian = TransformedDistribution(
            self.gaussian, [TanhTransform(cache_size=1)], validate_args=False
        )
        self.action_low = torch.as_tensor(low, dtype=inputs.dtype)
        self.action_high = torch.as_tensor(high, dtype=inputs.dtype)
        # [-1, 1] -> [low, high].
        self.to_box = AffineTransform(
            loc=torch.as_tensor((high + low) / 2, dtype=inputs.dtype),
            scale=torch.as_tensor((high - low) / 2, dtype=inputs.dtype),
            event_dim=1,
        )

    @staticmethod
    def check_bounds(low: Any, high: Any) -> tuple[np.ndarray, np.ndarray]:
        """The bounds as float64[k] arrays.

        Raises:
            ValueError: a bound is missing or not finite (the message names the
                indices), or ``low >= high`` somewhere.
        """
        if low is None or high is None:
            raise ValueError("SquashedGaussian needs the Box's bounds (low and high)")
        low = np.asarray(low, dtype=np.float64).ravel()
        high = np.asarray(high, dtype=np.float64).ravel()
        bad_low = np.flatnonzero(~np.isfinite(low)).tolist()
        bad_high = np.flatnonzero(~np.isfinite(high)).tolist()
        if bad_low or bad_high:
            raise ValueError(
                "a squashed Gaussian needs a Box with finite bounds, but low is infinite at "
                f"indices {bad_low} and high at {bad_high}: give the Box finite low/high, or "
                "leave squash_to_range off and dist_type unset (a DiagGaussian, whose "
                "actions the sampler clips for the env)"
            )
        if not np.all(low < high):
            raise ValueError(f"a squashed Gaussian needs low < high, got {low} and {high}")
        return low, high

    def _to_action(self, y: torch.Tensor) -> torch.Tensor:
        """tanh-space values in [-1, 1] -> actions, clamped to the bounds against
        rounding (clamp's gradient is 1 inside and on the bounds)."""
        return torch.clamp(self.to_box(y), self.action_low, self.action_high)

    def _logp_tanh_space(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """log pi(x) float[B] of actions x = to_box(y), from their tanh-space values y."""
        return self.tanh_gaussian.log_prob(y) - self.to_box.log_abs_det_jacobian(y, x)

    def sample(self) -> torch.Tensor:
        """A reparameterised sample float[B, k] (gradients flow to the inputs)."""
        self.last_sample = self._to_action(self.tanh_gaussian.rsample())
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        """The squashed mean ``low + (tanh(mean) + 1) / 2 * (high - low)``, float[B, k]."""
        self.last_sample = self._to_action(torch.tanh(self.mean))
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        """Log-density float[B] of actions float[B, k] (per unit of action volume).

        Actions on (or, by rounding, beyond) a bound are moved just inside it (by the
        dtype's machine epsilon in tanh space) before ``atanh``, so logp stays finite.
        """
        y = self.to_box.inv(x)
        eps = torch.finfo(y.dtype).eps
        return self._logp_tanh_space(y.clamp(-1.0 + eps, 1.0 - eps), x)

    def entropy(self) -> torch.Tensor:
        """A one-sample estimate float[B]: ``-logp`` of a reparameterised sample.

        The squashed Gaussian's entropy has no closed form; SAC's losses use the same
        estimate (``-log pi`` of the sampled action)."""
        y = self.tanh_gaussian.rsample()
        return -self._logp_tanh_space(y, self.to_box(y))

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """KL(self || other) float[B], exact: KL divergence is invariant under a
        bijection applied to both distributions, so it is the KL of the two
        underlying Gaussians.

        Raises:
            ValueError: `other` has other bounds (then the squashes differ).
        """
        assert isinstance(other, SquashedGaussian)
        if not (
            torch.equal(self.action_low, other.action_low)
            and torch.equal(self.action_high, other.action_high)
        ):
            raise ValueError("KL between squashed Gaussians needs the same bounds")
        return kl_divergence(self.gaussian, other.gaussian)

    required_model_output_shape = staticmethod(DiagGaussian.required_model_output_shape)


class Dirichlet(ActionDistribution):
    """A Dirichlet distribution over probability vectors (actions in [0, 1]^k that sum to
    1, e.g. a resource allocation; the action distribution of a `Simplex` action
    space), as RLlib's: the model's k outputs are log-concentrations, ``alpha = exp(x) +
    1e-7``.

    ``logp(a)`` first clips ``a`` to at least 1e-7 and renormalises it onto the simplex
    (actions at its edge come back from the env as exact zeros). ``deterministic_sample``
    is the distribution's mean ``alpha / sum(alpha)`` (RLlib takes ``softmax(alpha)``,
    which is not a statistic of the distribution). Samples are ``torch.distributions``'
    (Gamma draws normalised), so they carry no gradient.
    """

    EPS = 1e-7

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:
        super().__init__(inputs, model)
        self.concentration = torch.exp(inputs) + self.EPS
        self.dist = torch.distributions.Dirichlet(self.concentration, validate_args=False)

    def sample(self) -> torch.Tensor:
        self.last_sample = self.dist.sample()
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = self.concentration / self.concentration.sum(-1, keepdim=True)
        return self.last_sample

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.clamp(x.to(self.concentration.dtype), min=self.EPS)
        return self.dist.log_prob(x / x.sum(-1, keepdim=True))

    def entropy(self) -> torch.Tensor:
        return self.dist.entropy()

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, Dirichlet)
        return kl_divergence(self.dist, other.dist)

    @staticmethod
    def required_model_output_shape(action_space: Any, model_config: dict[str, Any]) -> int:
        return int(np.prod(action_space.shape))


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SAC's clamp of the policy's log standard deviation


def tanh_gaussian_rsample(
    mean: torch.Tensor, log_std: torch.Tensor, deterministic: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised sample of `SquashedGaussian` in tanh space, with its
    log-density: the fast path of SAC's losses (plain tensor ops, no
    ``torch.distributions`` objects).

    ``u = mean + exp(log_std) * eps`` with ``eps ~ N(0, I)`` (``u = mean`` when
    `deterministic`), ``y = tanh(u)`` in [-1, 1]^k and
    ``log pi(y) = log N(u; mean, std) - sum log(1 - tanh(u)^2)`` (Haarnoja et al. 2018,
    Appendix C, eq. 21), with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``, the
    stable form ``TanhTransform`` uses. For a Box ``[low, high]``, `SquashedGaussian`'s
    ``logp`` of the action ``low + (y + 1) / 2 (high - low)`` is this minus
    ``sum log((high - low) / 2)``.

    Args:
        mean, log_std: float32[B, k], the Gaussian's mean and log standard deviation.
        deterministic: take ``u = mean`` (the log-density is then that of the mode).

    Returns:
        ``(y float32[B, k], logp float32[B])``; gradients flow to `mean` and `log_std`.
    """
    if deterministic:
        eps = torch.zeros_like(mean)
        u = mean
    else:
        eps = torch.randn_like(mean)
        u = mean + log_std.exp() * eps
    log_normal = -0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))
    return torch.tanh(u), (log_normal - log_det).sum(-1)


# RLlib's torch names.
TorchCategorical = Categorical
TorchDiagGaussian = DiagGaussian
TorchDeterministic = Deterministic
TorchMultiCategorical = MultiCategorical
TorchSquashedGaussian = SquashedGaussian
TorchDirichlet = Dirichlet
