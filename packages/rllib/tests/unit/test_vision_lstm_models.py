"""The vision network and the LSTM wrapper, built through `ModelCatalog`."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.models.torch_lstm import LSTMWrapper
from rayfield.rllib.models.torch_models import FullyConnectedNetwork
from rayfield.rllib.models.torch_vision import VisionNetwork, get_filter_config

ACT = gym.spaces.Discrete(3)


@pytest.mark.parametrize("size", [84, 42])
def test_default_filters_reduce_the_image_to_one_pixel(size: int) -> None:
    space = gym.spaces.Box(0, 1, (size, size, 4))
    model = ModelCatalog.get_model_v2(space, ACT, 3, {})
    assert isinstance(model, VisionNetwork)
    convs = [m for m in model._convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (f[0], tuple(f[1]), (f[2], f[2])) for f in get_filter_config((size, size))
    ]
    out, state = model({"obs": torch.rand(2, size, size, 4)})
    assert out.shape == (2, 3) and state == []
    assert model.value_function().shape == (2,)
    # the last convolution is valid-padded and leaves 1x1x256 features
    assert model._logits.in_features == 256  # type: ignore[union-attr]


def test_unknown_image_size_needs_conv_filters() -> None:
    space = gym.spaces.Box(0, 1, (30, 30, 1))
    with pytest.raises(ValueError, match="conv_filters"):
        ModelCatalog.get_model_v2(space, ACT, 3, {})
    model = ModelCatalog.get_model_v2(
        space,
        ACT,
        3,
        {"conv_filters": [[4, [3, 3], 2], [8, [15, 15], 1]], "conv_activation": "elu"},
    )
    out, _ = model({"obs": np.zeros((5, 30, 30, 1), np.float32)})
    assert out.shape == (5, 3)
    with pytest.raises(ValueError, match="below 1x1"):
        ModelCatalog.get_model_v2(
            space, ACT, 3, {"conv_filters": [[4, [3, 3], 2], [8, [40, 40], 1]]}
        )
    with pytest.raises(ValueError, match="out_channels, kernel, stride"):
        ModelCatalog.get_model_v2(space, ACT, 3, {"conv_filters": [[4, 3]]})
    with pytest.raises(ValueError, match="conv_activation"):
        ModelCatalog.get_model_v2(
            space, ACT, 3, {"conv_filters": [[4, [30, 30], 1]], "conv_activation": "nope"}
        )


@pytest.mark.parametrize("share", [True, False])
def test_vision_value_head_shared_or_separate(share: bool) -> None:
    space = gym.spaces.Box(0, 1, (42, 42, 1))
    model = ModelCatalog.get_model_v2(space, ACT, 3, {"vf_share_layers": share})
    assert (model._value_convs is None) == share


def test_lstm_wraps_the_default_models() -> None:
    cfg = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16]}
    fc = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), ACT, 3, cfg)
    assert isinstance(fc, LSTMWrapper) and isinstance(fc.base, FullyConnectedNetwork)
    assert [s.shape for s in fc.get_initial_state()] == [(8,), (8,)]
    img = ModelCatalog.get_model_v2(
        gym.spaces.Box(0, 1, (10, 10, 1)), ACT, 3, {**cfg, "conv_filters": [[4, [10, 10], 1]]}
    )
    assert isinstance(img.base, VisionNetwork)
    out, state = img({"obs": torch.rand(2, 10, 10, 1)}, [torch.zeros(2, 8), torch.zeros(2, 8)])
    assert out.shape == (2, 3) and [s.shape for s in state] == [(2, 8), (2, 8)]
    with pytest.raises(ValueError, match="max_seq_len"):
        ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (4,)), ACT, 3, {**cfg, "max_seq_len": 0})


def test_lstm_sequence_equals_step_by_step() -> None:
    """A padded batch of sequences gives the same outputs as stepping one row at a
    time with the state carried over."""
    torch.manual_seed(0)
    cfg = {"use_lstm": True, "lstm_cell_size": 6, "fcnet_hiddens": [5]}
    model = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (3,)), ACT, 3, cfg)
    obs = torch.randn(2, 4, 3)  # 2 sequences of 4 steps
    h = [torch.zeros(2, 6), torch.zeros(2, 6)]
    stepped = []
    for t in range(4):
        out, h = model({"obs": obs[:, t]}, h)
        stepped.append(out)
    stepped_t = torch.stack(stepped, dim=1).reshape(8, 3)
    batched, state = model(
        {"obs": obs.reshape(8, 3)}, [torch.zeros(2, 6), torch.zeros(2, 6)], np.array([4, 4])
    )
    assert torch.allclose(batched, stepped_t, atol=1e-5)
    assert torch.allclose(state[0], h[0], atol=1e-5)


def test_lstm_reads_previous_action_and_reward() -> None:
    torch.manual_seed(0)
    cfg = {
        "use_lstm": True,
        "lstm_cell_size": 4,
        "fcnet_hiddens": [4],
        "lstm_use_prev_action": True,
        "lstm_use_prev_reward": True,
    }
    model = ModelCatalog.get_model_v2(gym.spaces.Box(-1, 1, (2,)), ACT, 3, cfg)
    assert model.lstm.input_size == 4 + 3 + 1
    obs = torch.zeros(1, 2)
    a, _ = model({"obs": obs, "prev_actions": torch.tensor([0]), "prev_rewards": torch.zeros(1)})
    b, _ = model({"obs": obs, "prev_actions": torch.tensor([2]), "prev_rewards": torch.zeros(1)})
    c, _ = model({"obs": obs, "prev_actions": torch.tensor([0]), "prev_rewards": torch.ones(1)})
    assert not torch.allclose(a, b) and not torch.allclose(a, c)
    both = ModelCatalog.get_model_v2(
        gym.spaces.Box(-1, 1, (2,)),
        ACT,
        3,
        {
            "use_lstm": True,
            "lstm_cell_size": 4,
            "fcnet_hiddens": [4],
            "lstm_use_prev_action_reward": True,
        },
    )
    assert both.lstm.input_size == 4 + 3 + 1
