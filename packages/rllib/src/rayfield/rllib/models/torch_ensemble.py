"""Fully connected networks for the off-policy actor-critic algorithms (SAC, DDPG, TD3).

`EnsembleMLP` holds several MLPs of one shape (TD3's and SAC's twin Q-functions) as
stacked weights and runs them together: one batched matrix product per layer
(``torch.baddbmm``) instead of one small product per member, in the forward and the
backward pass. `polyak_update` moves target networks towards the online ones with one
fused ``lerp_`` over all tensors.

Sources:
    Fujimoto, van Hoof, Meger, "Addressing Function Approximation Error in Actor-Critic
    Methods", ICML 2018 (clipped double Q-learning: two critics, the minimum as target).
    Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016
    (soft target updates ``theta' <- tau theta + (1 - tau) theta'``, Algorithm 1).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

import torch
from torch import nn

__all__ = ["ACTIVATIONS", "EnsembleMLP", "mlp", "polyak_update"]

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "swish": nn.SiLU, "silu": nn.SiLU}


def _activation(name: str | None) -> type[nn.Module]:
    """The activation module class for a config name (``relu``, ``tanh``...).

    Raises:
        ValueError: an unknown name (lists the known ones).
    """
    key = "relu" if name is None else str(name).lower()
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}: use one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[key]


def _is_relu(name: str | None) -> bool:
    return name is None or str(name).lower() == "relu"


def mlp(in_size: int, hiddens: Sequence[int], out_size: int, activation: str = "relu") -> nn.Module:
    """A fully connected network float32[B, in_size] -> float32[B, out_size] with the
    given hidden layer sizes and activation (none after the last layer). ReLU runs in
    place on the layer's output (a linear layer's backward pass does not read it).

    Raises:
        ValueError: an unknown activation name.
    """
    act = _activation(activation)
    relu = _is_relu(activation)
    layers: list[nn.Module] = []
    last = int(in_size)
    for size in hiddens:
        layers += [nn.Linear(last, int(size)), nn.ReLU(inplace=True) if relu else act()]
        last = int(size)
    layers.append(nn.Linear(last, int(out_size)))
    return nn.Sequential(*layers)


class EnsembleMLP(nn.Module):
    """`num_members` MLPs of one shape, evaluated together.

    Member ``m``'s layer ``i`` is ``x @ weights[i][m] + biases[i][m]``; every member is
    initialised as `torch.nn.Linear` initialises its layers (uniform in
    ``+-1/sqrt(fan_in)``), independently.

    Args:
        num_members: how many networks (2 for twin Q-functions).
        in_size: input features.
        hiddens: hidden layer sizes.
        out_size: outputs per member.
        activation: hidden activation name (``relu``, ``tanh``, ``elu``, ``swish``).

    Raises:
        ValueError: ``num_members`` < 1 or an unknown activation.
    """

    def __init__(
        self,
        num_members: int,
        in_size: int,
        hiddens: Sequence[int],
        out_size: int,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if num_members < 1:
            raise ValueError(f"EnsembleMLP needs num_members >= 1, got {num_members}")
        self.num_members = int(num_members)
        self.act = _activation(activation)()
        self._relu_inplace = _is_relu(activation)
        sizes = [int(in_size), *(int(h) for h in hiddens), int(out_size)]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            w = torch.empty(self.num_members, fan_in, fan_out).uniform_(-bound, bound)
            b = torch.empty(self.num_members, 1, fan_out).uniform_(-bound, bound)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))

    def forward(
        self, x: torch.Tensor, detach: bool = False, members: slice | None = None
    ) -> torch.Tensor:
        """Outputs float32[M, B, out_size] of the members for inputs float32[B, in_size]
        (the same rows for every member) or float32[M, B, in_size] (one block per member).

        Args:
            x: the inputs.
            detach: use the parameters without gradient (the actor's loss in SAC and TD3
                differentiates through the critics to the actions, not into the critics).
            members: a slice of the members to run (default all; ``slice(0, 1)``: the
                first critic only, TD3's actor loss).
        """
        n_layers = len(self.weights)
        for i in range(n_layers):
            w, b = self.weights[i], self.biases[i]
            if members is not None:
                # a slice's backward pass copies its gradient into a zeroed full-size
                # tensor, so all members take the parameters as they are
                w, b = w[members], b[members]
            if detach:
                w, b = w.detach(), b.detach()
            if x.dim() == 2:
                x = x.unsqueeze(0).expand(w.shape[0], -1, -1)
            x = torch.baddbmm(b, x, w)
            if i < n_layers - 1:
                # in place: baddbmm's backward pass does not read its output
                x = torch.relu_(x) if self._relu_inplace else self.act(x)
        return x


@torch.no_grad()
def polyak_update(
    target: Iterable[torch.Tensor], source: Iterable[torch.Tensor], tau: float
) -> None:
    """``target <- tau * source + (1 - tau) * target`` for each pair of tensors, in place
    (``tau = 1`` copies). One fused ``torch._foreach_lerp_`` call.

    Raises:
        ValueError: ``tau`` outside [0, 1], or the two sequences differ in length.
    """
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    tgt, src = list(target), list(source)
    if len(tgt) != len(src):
        raise ValueError(f"polyak_update: {len(tgt)} target tensors but {len(src)} sources")
    if tgt:
        torch._foreach_lerp_(tgt, src, float(tau))
