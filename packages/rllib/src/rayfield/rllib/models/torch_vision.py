"""The vision network: a stack of convolutions for image observations.

Observations are ``[B, H, W, C]`` float32 images (channels last, as gymnasium and
the Atari wrappers give them); the network moves the channels first for torch.
Each ``conv_filters`` entry ``[out_channels, kernel, stride]`` is one convolution
with ``conv_activation``. Every layer but the last pads "same" (output size
``ceil(in / stride)``); the last one is unpadded ("valid") and is expected to
reduce the image to 1x1, as the defaults do. A 1x1 convolution (a linear layer)
then maps its channels to ``num_outputs``.

Sources:
    Mnih et al., "Human-level control through deep reinforcement learning",
    Nature 518, 2015 (the 84x84 filter stack: 8x8/4, 4x4/2 and a wide last layer).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rayfield.rllib.models.torch_models import (
    ROOT2,
    TorchModelV2,
    activation_class,
    orthogonal,
    policy_head,
    policy_head_output,
    value_branch,
    with_activations,
)

# Default ``conv_filters`` by image size (height, width).
DEFAULT_CONV_FILTERS: dict[tuple[int, int], list[list[Any]]] = {
    (84, 84): [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 1]],
    (42, 42): [[16, [4, 4], 2], [32, [4, 4], 2], [256, [11, 11], 1]],
}


def get_filter_config(shape: tuple[int, ...]) -> list[list[Any]]:
    """The default ``conv_filters`` for an image of `shape` ``(H, W[, C])``.

    Raises:
        ValueError: no default exists for the size (only 84x84 and 42x42 have one);
            the message says to set ``model.conv_filters``.
    """
    key = (int(shape[0]), int(shape[1]))
    if key not in DEFAULT_CONV_FILTERS:
        raise ValueError(
            f"No default configuration for obs shape {tuple(shape)}: only 84x84 and 42x42 "
            "images have default conv_filters; set model.conv_filters to a list of "
            "[out_channels, kernel, stride] entries, e.g. [[16, [4, 4], 2], [32, [5, 5], 1]]"
        )
    return [list(f) for f in DEFAULT_CONV_FILTERS[key]]


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ValueError(f"a kernel or stride must be an int or [h, w], got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _same_padding(size: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int]) -> Any:
    """(left, right, top, bottom) zero padding that makes the output ceil(in/stride)."""
    pads = []
    for n, k, s in zip(size, kernel, stride):
        out = math.ceil(n / s)
        total = max((out - 1) * s + k - n, 0)
        pads.append((total // 2, total - total // 2))
    (top, bottom), (left, right) = pads
    return (left, right, top, bottom), (
        math.ceil(size[0] / stride[0]),
        math.ceil(size[1] / stride[1]),
    )


# One convolution of a tower: (padding or None, in_channels, out_channels, kernel, stride)
_ConvSpec = tuple[tuple[int, int, int, int] | None, int, int, tuple[int, int], tuple[int, int]]


def conv_layout(in_shape: tuple[int, ...], filters: list[list[Any]]) -> tuple[list[_ConvSpec], int]:
    """The convolutions of `filters` over ``(H, W, C)`` images and the width F of
    their flattened output, checked before any layer is made.

    Raises:
        ValueError: no filter, a malformed filter entry, or filters that shrink the
            image below 1x1.
    """
    if not filters:
        raise ValueError("conv_filters must hold at least one [out_channels, kernel, stride]")
    size = (int(in_shape[0]), int(in_shape[1]))
    channels = int(in_shape[2])
    specs: list[_ConvSpec] = []
    for i, entry in enumerate(filters):
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(
                f"conv_filters[{i}] must be [out_channels, kernel, stride], got {entry!r}"
            )
        out_ch, kernel, stride = int(entry[0]), _pair(entry[1]), _pair(entry[2])
        pad = None
        if i < len(filters) - 1:
            pad, size = _same_padding(size, kernel, stride)
        else:
            size = ((size[0] - kernel[0]) // stride[0] + 1, (size[1] - kernel[1]) // stride[1] + 1)
        if size[0] < 1 or size[1] < 1:
            raise ValueError(
                f"conv_filters[{i}] {entry!r} shrinks the {in_shape[0]}x{in_shape[1]} image "
                "below 1x1: use a smaller kernel or stride"
            )
        specs.append((pad if pad and any(pad) else None, channels, out_ch, kernel, stride))
        channels = out_ch
    return specs, channels * size[0] * size[1]


def conv_tower(
    in_shape: tuple[int, ...], filters: list[list[Any]], activation: str
) -> tuple[nn.Sequential, int]:
    """The convolutions of `filters` over ``(H, W, C)`` images, then flattening.

    Returns:
        ``(module mapping float32[B, C, H, W] -> float32[B, F], F)``.

    Raises:
        ValueError: a malformed filter entry, an unknown activation, or filters that
            shrink the image below 1x1.
    """
    act = activation_class(activation, "conv_activation")
    specs, width = conv_layout(in_shape, filters)
    layers: list[nn.Module] = []
    for pad, in_ch, out_ch, kernel, stride in specs:
        if pad is not None:
            layers.append(nn.ZeroPad2d(pad))
        layers.append(orthogonal(nn.Conv2d(in_ch, out_ch, kernel, stride), ROOT2))
    return nn.Sequential(*with_activations(layers, act), nn.Flatten()), width


class VisionNetwork(TorchModelV2):
    """Convolutions (``conv_filters``, ``conv_activation``) and linear heads.

    The policy head maps the flattened output of the last convolution to
    ``num_outputs`` (a 1x1 convolution when that output is 1x1). The value head
    sits on the same features with ``vf_share_layers``; otherwise the value
    function has its own convolution tower of the same shape. With
    ``num_outputs=None`` the model has no heads and returns the features
    (``self.num_outputs`` is then their width), for wrappers such as the LSTM.

    Args:
        obs_space: a Box of shape ``(H, W, C)``.
        action_space: the action space.
        num_outputs: output width, or None for features only.
        model_config: ``model`` config; reads ``conv_filters`` (default by image
            size, see `get_filter_config`), ``conv_activation``, ``vf_share_layers``,
            ``free_log_std``.
        name: the model's name.

    Raises:
        ValueError: the observation is not ``(H, W, C)``, or the filters do not fit it.
    """

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        num_outputs: int | None,
        model_config: dict[str, Any],
        name: str = "visionnet",
    ) -> None:
        shape = tuple(obs_space.shape)
        if len(shape) != 3:
            raise ValueError(f"VisionNetwork needs (H, W, C) observations, got shape {shape}")
        filters = model_config.get("conv_filters") or get_filter_config(shape)
        feat = conv_layout(shape, filters)[1]
        # features only: the output is the flattened last convolution
        width = feat if num_outputs is None else num_outputs
        super().__init__(obs_space, action_space, width, model_config, name)
        activation = model_config.get("conv_activation", "relu")
        self.vf_share_layers = bool(model_config.get("vf_share_layers", False))
        self.free_log_std = bool(model_config.get("free_log_std", False))
        self._convs = conv_tower(shape, filters, activation)[0]
        self._logits: nn.Module | None = None
        self._value_convs: nn.Module | None = None
        self._value_branch: nn.Linear | None = None
        if num_outputs is not None:
            self._logits = policy_head(self, feat, num_outputs)
            if not self.vf_share_layers:
                self._value_convs = conv_tower(shape, filters, activation)[0]
            self._value_branch = orthogonal(nn.Linear(feat, 1), 1.0)
        self._features: torch.Tensor | None = None
        self._images: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any
    ) -> tuple[torch.Tensor, list[Any]]:
        images = input_dict["obs"].float().permute(0, 3, 1, 2)
        self._images = images
        out: tuple[torch.Tensor, list[Any]] = policy_head_output(self, self._convs(images), state)
        return out

    def value_function(self) -> torch.Tensor:
        branch = value_branch(self, self._features, self._images)
        feats = self._features if self._value_convs is None else self._value_convs(self._images)
        value: torch.Tensor = branch(feats).squeeze(-1)
        return value
