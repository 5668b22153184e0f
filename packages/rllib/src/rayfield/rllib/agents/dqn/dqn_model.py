"""DQN's Q-network: a body, dueling streams, noisy layers and distributional heads.

The body is an MLP (``fcnet_hiddens``) for vector observations and the vision
network's convolutions for ``(H, W, C)`` images. On it sit an advantage stream
and, when dueling, a state-value stream, each with ``hiddens`` ReLU layers.

* ``num_atoms`` = 1: the streams give ``A[B, n_actions]`` and ``V[B, 1]``, and
  ``Q = V + A - mean_a A``.
* ``num_atoms`` = N > 1 (C51): they give logits over the N atoms of the support
  ``z_i = v_min + i (v_max - v_min) / (N - 1)`` per action, combined the same way
  per atom; ``p = softmax_atoms(logits)`` and ``Q = sum_i p_i z_i``.
* ``noisy``: every linear layer of the streams is a factorised-Gaussian
  `NoisyLinear`; the noise is drawn anew at every forward pass while
  `set_noise(True)` and replaces epsilon-greedy exploration.

`forward` returns ``Q[B, n_actions]``; after it ``last_logits`` holds the atom
logits ``[B, n_actions, N]`` (distributional) and ``value_function()`` the state
values.

Sources:
    Wang et al., "Dueling Network Architectures for Deep Reinforcement Learning",
    ICML 2016.
    Bellemare, Dabney, Munos, "A Distributional Perspective on Reinforcement
    Learning", ICML 2017 (C51).
    Fortunato et al., "Noisy Networks for Exploration", ICLR 2018 (factorised
    Gaussian noise, section 3.2; initialisation, section 3.2.2).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from rayfield.rllib.models.torch_models import TorchModelV2, _mlp
from rayfield.rllib.models.torch_vision import conv_tower, get_filter_config


class NoisyLinear(nn.Module):
    """``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with factorised
    noise ``eps_w = f(eps_out) f(eps_in)^T``, ``eps_b = f(eps_out)``,
    ``f(x) = sign(x) sqrt(|x|)``, ``eps ~ N(0, 1)``. ``mu`` starts uniform in
    ``[-1/sqrt(in), 1/sqrt(in)]`` and ``sigma`` at ``sigma0 / sqrt(in)``.

    Args:
        in_features, out_features: the layer's sizes.
        sigma0: the initial noise scale (``sigma0`` in the config; 0.5 in the paper).
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.mu_w = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.mu_b = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.sigma_w = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.sigma_b = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.noise = True

    @staticmethod
    def _f(x: torch.Tensor) -> torch.Tensor:
        return x.sign() * x.abs().sqrt()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.noise:
            return nn.functional.linear(x, self.mu_w, self.mu_b)
        eps_in = self._f(torch.randn(self.mu_w.shape[1], device=x.device))
        eps_out = self._f(torch.randn(self.mu_w.shape[0], device=x.device))
        weight = self.mu_w + self.sigma_w * torch.outer(eps_out, eps_in)
        bias = self.mu_b + self.sigma_b * eps_out
        return nn.functional.linear(x, weight, bias)


def _stream(sizes: list[int], noisy: bool, sigma0: float, out_gain: float) -> nn.Sequential:
    if not noisy:
        return _mlp(sizes, "relu", out_gain)
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(NoisyLinear(sizes[i], sizes[i + 1], sigma0))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DQNTorchModel(TorchModelV2):
    """The Q-network (see the module docstring).

    Args:
        obs_space, action_space, num_outputs, model_config, name: as for
            `TorchModelV2` (`num_outputs` = the number of actions).
        q_hiddens: the streams' hidden layer sizes (``hiddens``).
        dueling: add the state-value stream.
        num_atoms: atoms of the return distribution (1: expected Q only).
        v_min, v_max: the support's bounds (``num_atoms`` > 1).
        noisy: noisy linear layers in the streams.
        sigma0: their initial noise scale.
    """

    support: torch.Tensor  # the atoms z_i, float32[num_atoms] (a buffer)

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        num_outputs: int,
        model_config: dict[str, Any],
        name: str = "dqn",
        *,
        q_hiddens: list[int] | None = None,
        dueling: bool = True,
        num_atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
        noisy: bool = False,
        sigma0: float = 0.5,
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        in_dim = int(np.prod(obs_space.shape))
        self.images = len(obs_space.shape) == 3
        self.body: nn.Module
        if self.images:
            filters = model_config.get("conv_filters") or get_filter_config(obs_space.shape)
            self.body, feat = conv_tower(
                obs_space.shape, filters, model_config.get("conv_activation", "relu")
            )
            self.body_act: nn.Module = nn.Identity()
        else:
            body = list(model_config.get("fcnet_hiddens", [256, 256]))
            act = model_config.get("fcnet_activation", "tanh")
            self.body = _mlp([in_dim, *body], act, float(np.sqrt(2))) if body else nn.Identity()
            self.body_act = nn.Tanh() if act == "tanh" else nn.ReLU()
            feat = body[-1] if body else in_dim
        hiddens = list(q_hiddens or [])
        self.num_atoms = int(num_atoms)
        self.n_actions = int(num_outputs)
        self.advantage = _stream(
            [feat, *hiddens, num_outputs * self.num_atoms], noisy, sigma0, 0.01
        )
        self.dueling = dueling
        self.value_stream: nn.Module | None = (
            _stream([feat, *hiddens, self.num_atoms], noisy, sigma0, 1.0) if dueling else None
        )
        self.register_buffer("support", torch.linspace(v_min, v_max, max(2, self.num_atoms)))
        self.last_logits: torch.Tensor | None = None
        self._value: torch.Tensor | None = None

    def set_noise(self, on: bool) -> None:
        """Draw noise in the noisy layers (True) or use their mean weights (False)."""
        for m in self.modules():
            if isinstance(m, NoisyLinear):
                m.noise = on

    def forward(
        self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any
    ) -> tuple[torch.Tensor, list[Any]]:
        obs = input_dict["obs"].float()
        x = obs.permute(0, 3, 1, 2) if self.images else obs.reshape(obs.shape[0], -1)
        feats = self.body(x)
        if not isinstance(self.body, nn.Identity):
            feats = self.body_act(feats)
        adv = self.advantage(feats)
        if self.num_atoms > 1:
            adv = adv.reshape(-1, self.n_actions, self.num_atoms)
            logits = adv
            if self.value_stream is not None:
                value = self.value_stream(feats).unsqueeze(1)
                logits = value + adv - adv.mean(dim=1, keepdim=True)
            self.last_logits = logits
            q = (torch.softmax(logits, dim=-1) * self.support).sum(-1)
            self._value = q.max(dim=-1).values
            return q, state
        if self.value_stream is not None:
            value = self.value_stream(feats)
            self._value = value.squeeze(-1)
            return value + adv - adv.mean(dim=-1, keepdim=True), state
        self._value = adv.max(dim=-1).values
        return adv, state

    def value_function(self) -> torch.Tensor:
        assert self._value is not None, "call forward() first"
        return self._value


def project_distribution(
    next_probs: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    support: torch.Tensor,
) -> torch.Tensor:
    """C51's categorical projection (Bellemare et al. 2017, Algorithm 1): the
    distribution of ``r + discount * Z(s', a*)``, with atoms ``support``, moved onto
    the same support.

    Args:
        next_probs: ``float32[B, N]``, the target distribution at ``(s', a*)``.
        rewards: ``float32[B]``, the (n-step) rewards.
        discounts: ``float32[B]``, ``gamma**m`` times 0 at terminal states.
        support: ``float32[N]``, the atoms ``z_0 < ... < z_{N-1}`` (evenly spaced).

    Returns:
        ``float32[B, N]``: the projected target distribution (rows sum to 1).
    """
    n = support.shape[0]
    v_min, v_max = float(support[0]), float(support[-1])
    delta = (v_max - v_min) / (n - 1)
    tz = (rewards.unsqueeze(1) + discounts.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)
    b = (tz - v_min) / delta
    lower = b.floor().long()
    upper = b.ceil().long()
    # an atom that lands exactly on a support point gives all its mass to it
    lower_w = upper.float() - b + (lower == upper).float()
    upper_w = b - lower.float()
    out = torch.zeros_like(next_probs)
    out.scatter_add_(1, lower, next_probs * lower_w)
    out.scatter_add_(1, upper, next_probs * upper_w)
    return out
