"""Torch models: the `TorchModelV2` interface and the fully connected network.

A model maps ``input_dict["obs"]`` (float32[B, obs_dim], already preprocessed and
filtered) to the action distribution's inputs (float32[B, num_outputs]) and keeps
the value estimate of the same forward pass for `value_function()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "swish": nn.SiLU, "linear": None}


class TorchModelV2(nn.Module):
    """Base class of torch models (subclass it for a custom model).

    Args:
        obs_space: the (preprocessed) observation space; ``obs_space.shape`` is the
            shape of ``input_dict["obs"]`` rows.
        action_space: the action space.
        num_outputs: width of the output, as the action distribution needs it.
        model_config: the ``model`` config dict (``MODEL_DEFAULTS`` keys).
        name: a name for the model.
    """

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        num_outputs: int,
        model_config: dict[str, Any],
        name: str,
    ) -> None:
        nn.Module.__init__(self)
        self.obs_space = obs_space
        self.action_space = action_space
        self.num_outputs = num_outputs
        self.model_config = model_config
        self.name = name

    def forward(
        self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any
    ) -> tuple[torch.Tensor, list[Any]]:
        """Return ``(outputs float32[B, num_outputs], state_out)``."""
        raise NotImplementedError

    def value_function(self) -> torch.Tensor:
        """The value estimates (float32[B]) of the last `forward` call."""
        raise NotImplementedError

    def get_initial_state(self) -> list[Any]:
        return []

    def custom_loss(self, policy_loss: torch.Tensor, loss_inputs: Any) -> torch.Tensor:
        """Hook to change the policy loss (e.g. add a supervised term)."""
        return policy_loss

    def metrics(self) -> dict[str, float]:
        """Scalars reported under ``info/learner/<policy>/model``."""
        return {}

    def __call__(
        self, input_dict: Any, state: list[Any] | None = None, seq_lens: Any = None
    ) -> Any:
        if isinstance(input_dict, dict) and not isinstance(input_dict["obs"], torch.Tensor):
            input_dict = {**input_dict, "obs": torch.as_tensor(np.asarray(input_dict["obs"]))}
        return super().__call__(input_dict, state or [], seq_lens)


# The activations of ACTIVATIONS as functions, for `run_layers`.
_ACTIVATION_FNS = {
    nn.Tanh: torch.tanh,
    nn.ReLU: torch.relu,
    nn.ELU: nn.functional.elu,
    nn.SiLU: nn.functional.silu,
}


def run_layers(layers: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layers(x)`` for an ``nn.Sequential`` (or one layer), with its ``nn.Linear``
    layers and the activations of `ACTIVATIONS` (default arguments) applied as functions
    of their parameters: the same result and gradients, without a module call per layer,
    which is most of the cost of a small network on a few rows (a rollout worker's
    forward pass on one observation). Other layers are called as modules; forward hooks
    registered on the linear and activation layers are not run."""
    for m in layers if isinstance(layers, nn.Sequential) else (layers,):
        kind = type(m)
        if kind is nn.Linear:
            linear: nn.Linear = m  # type: ignore[assignment]
            x = nn.functional.linear(x, linear.weight, linear.bias)
        elif kind in _ACTIVATION_FNS:
            x = _ACTIVATION_FNS[kind](x)
        else:
            x = m(x)
    return x


def policy_head_output(model: Any, feats: torch.Tensor, state: list[Any]) -> Any:
    """``(outputs, state)`` of a model with a ``_logits`` head (None: features only)
    and optional ``free_log_std``; records the features for `value_function`."""
    model._features = feats
    if model._logits is None:
        return feats, state
    out = run_layers(model._logits, feats)
    if model.free_log_std:
        out = torch.cat([out, model.log_std.expand_as(out)], dim=-1)
    return out, state


def value_branch(model: Any, *inputs: Any) -> nn.Module:
    """`model`'s value head (``model._value_branch``), once `forward` recorded its
    `inputs`.

    Raises:
        ValueError: a features-only model (``num_outputs=None``), which has no value head.
    """
    assert all(x is not None for x in inputs), "call forward() first"
    branch: nn.Module | None = model._value_branch
    if branch is None:
        raise ValueError("a features-only model (num_outputs=None) has no value function")
    return branch


def activation_class(name: str, key: str = "fcnet_activation") -> type[nn.Module] | None:
    """The torch module class of activation `name` (None for ``"linear"``).

    Raises:
        ValueError: an unknown name; the message names the config `key`.
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown {key} {name!r}; use one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


_Layer = TypeVar("_Layer", nn.Linear, nn.Conv2d)
ROOT2 = float(np.sqrt(2))  # the gain of hidden layers


def orthogonal(layer: _Layer, gain: float) -> _Layer:
    """`layer` with orthogonal weights of `gain` and zero biases."""
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def linears(sizes: Sequence[int], out_gain: float | None = None) -> list[nn.Linear]:
    """Linear layers between consecutive `sizes`, each initialised orthogonally as
    it is made: gain sqrt(2), or `out_gain` for the last (an output layer)."""
    n = len(sizes) - 1
    return [
        orthogonal(nn.Linear(a, b), out_gain if out_gain is not None and i == n - 1 else ROOT2)
        for i, (a, b) in enumerate(pairwise(sizes))
    ]


def with_activations(
    layers: Sequence[nn.Module], activation: type[nn.Module] | None, output_last: bool = False
) -> list[nn.Module]:
    """`layers` with `activation` after each layer that has weights, except the last
    one when `output_last` (an output layer); modules without weights (padding)
    get none."""
    weighted = [m for m in layers if isinstance(m, (nn.Linear, nn.Conv2d))]
    out: list[nn.Module] = []
    for module in layers:
        out.append(module)
        is_output = output_last and module is weighted[-1]
        if activation is not None and module in weighted and not is_output:
            out.append(activation())
    return out


def _mlp(sizes: list[int], activation: str, out_gain: float) -> nn.Sequential:
    """Linear layers between `sizes`; the last is an output layer of `out_gain`."""
    layers = linears(sizes, out_gain)
    return nn.Sequential(*with_activations(layers, activation_class(activation), True))


def policy_head(model: Any, in_dim: int, num_outputs: int) -> nn.Linear:
    """The policy output layer (gain 0.01) of a model with ``free_log_std``: half the
    outputs when it is set, the other half being ``model.log_std`` (created here)."""
    policy_out = num_outputs // 2 if model.free_log_std else num_outputs
    if model.free_log_std:
        model.log_std = nn.Parameter(torch.zeros(policy_out))
    return orthogonal(nn.Linear(in_dim, policy_out), 0.01)


class FullyConnectedNetwork(TorchModelV2):
    """A multi-layer perceptron with a policy head and a value head.

    Hidden layers from ``fcnet_hiddens`` with ``fcnet_activation``. With
    ``vf_share_layers`` the value head sits on the policy's last hidden layer;
    otherwise the value function has its own tower of the same sizes. With
    ``free_log_std`` the second half of the outputs (log standard deviations) is a
    free parameter, independent of the observation. With ``num_outputs=None`` the
    model has no heads and returns its last hidden layer (``self.num_outputs`` is
    then its width), for wrappers such as the LSTM. Weights are initialised
    orthogonally (gain sqrt(2) for hidden layers, 0.01 for the policy output, 1 for
    the value output).

    Sources:
        Engstrom et al., "Implementation Matters in Deep Policy Gradients: A Case
        Study on PPO and TRPO", ICLR 2020 (orthogonal initialisation).
    """

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        num_outputs: int | None,
        model_config: dict[str, Any],
        name: str = "fcnet",
    ) -> None:
        in_dim = int(np.prod(obs_space.shape))
        hiddens = list(model_config.get("fcnet_hiddens", [256, 256]))
        last = hiddens[-1] if hiddens else in_dim
        # features only: the output is the last hidden layer
        width = last if num_outputs is None else num_outputs
        super().__init__(obs_space, action_space, width, model_config, name)
        activation = model_config.get("fcnet_activation", "tanh")
        self.free_log_std = bool(model_config.get("free_log_std", False))
        self.vf_share_layers = bool(model_config.get("vf_share_layers", False))
        act = activation_class(activation)
        self._hidden = (
            nn.Sequential(*with_activations(linears([in_dim, *hiddens]), act)) if hiddens else None
        )
        self._logits: nn.Module | None = None
        self._value_branch: nn.Module | None = None
        if num_outputs is not None:  # None: features only (for wrappers such as the LSTM)
            self._logits = nn.Sequential(policy_head(self, last, num_outputs))
            if self.vf_share_layers:
                self._value_branch = _mlp([last, 1], activation, 1.0)
            else:
                self._value_branch = _mlp([in_dim, *hiddens, 1], activation, 1.0)
        self._features: torch.Tensor | None = None
        self._obs: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any
    ) -> tuple[torch.Tensor, list[Any]]:
        obs = input_dict["obs"].float().reshape(input_dict["obs"].shape[0], -1)
        self._obs = obs
        feats = run_layers(self._hidden, obs) if self._hidden is not None else obs
        return policy_head_output(self, feats, state)

    def value_function(self) -> torch.Tensor:
        branch = value_branch(self, self._features, self._obs)
        src = self._features if self.vf_share_layers else self._obs
        assert src is not None
        out: torch.Tensor = run_layers(branch, src).squeeze(-1)
        return out
