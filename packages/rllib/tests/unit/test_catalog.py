from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from torch import nn

from rayfield.rllib.models.catalog import MODEL_DEFAULTS, ModelCatalog
from rayfield.rllib.models.torch_models import (
    FullyConnectedNetwork,
    TorchModelV2,
    activation_class,
    run_layers,
)

OBS = gym.spaces.Box(-1, 1, (4,))


def test_model_defaults_has_the_07_keys() -> None:
    for key in (
        "conv_filters",
        "conv_activation",
        "fcnet_activation",
        "fcnet_hiddens",
        "free_log_std",
        "squash_to_range",
        "use_lstm",
        "max_seq_len",
        "lstm_cell_size",
        "lstm_use_prev_action_reward",
        "framestack",
        "dim",
        "grayscale",
        "zero_mean",
        "custom_preprocessor",
        "custom_model",
        "custom_options",
    ):
        assert key in MODEL_DEFAULTS


@pytest.mark.parametrize("share", [False, True])
def test_fcnet_shapes(share: bool) -> None:
    m = ModelCatalog.get_model_v2(
        OBS, gym.spaces.Discrete(2), 2, {"fcnet_hiddens": [8, 8], "vf_share_layers": share}
    )
    assert isinstance(m, FullyConnectedNetwork)
    out, state = m({"obs": torch.zeros(5, 4)})
    assert out.shape == (5, 2) and state == []
    assert m.value_function().shape == (5,)
    n_params = sum(p.numel() for p in m.parameters())
    # policy tower 4*8+8 + 8*8+8 + 8*2+2 = 130; a separate value tower adds 40+72+9, shared adds 9
    assert n_params == (130 + 9 if share else 130 + 121)


def test_free_log_std_is_a_parameter() -> None:
    m = ModelCatalog.get_model_v2(
        OBS, gym.spaces.Box(-1, 1, (2,)), 4, {"fcnet_hiddens": [8], "free_log_std": True}
    )
    out, _ = m({"obs": torch.randn(3, 4)})
    assert out.shape == (3, 4)
    assert torch.equal(out[0, 2:], out[1, 2:])


class TinyModel(TorchModelV2):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name, scale=1.0):  # type: ignore[no-untyped-def]
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.lin = torch.nn.Linear(4, num_outputs)
        self.scale = scale

    def forward(self, input_dict, state, seq_lens):  # type: ignore[no-untyped-def]
        self._v = input_dict["obs"].sum(-1)
        return self.lin(input_dict["obs"]) * self.scale, state

    def value_function(self):  # type: ignore[no-untyped-def]
        return self._v


def test_custom_model_by_name() -> None:
    ModelCatalog.register_custom_model("tiny", TinyModel)
    m = ModelCatalog.get_model_v2(
        OBS,
        gym.spaces.Discrete(2),
        2,
        {"custom_model": "tiny", "custom_model_config": {"scale": 2.0}},
    )
    assert isinstance(m, TinyModel) and m.scale == 2.0
    assert "tiny" in ModelCatalog.snapshot()["models"]
    with pytest.raises(KeyError, match="not registered"):
        ModelCatalog.get_model_v2(OBS, gym.spaces.Discrete(2), 2, {"custom_model": "nope"})


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "swish", "linear"])
def test_run_layers_matches_the_module_call_with_gradients(activation: str) -> None:
    # run_layers applies Linear layers and activations as functions: the same outputs
    # and parameter gradients as calling the nn.Sequential
    torch.manual_seed(0)
    act = activation_class(activation)
    layers = [nn.Linear(4, 8), *([act()] if act else []), nn.LayerNorm(8), nn.Linear(8, 3)]
    seq = nn.Sequential(*layers)
    x = torch.randn(5, 4)
    out = run_layers(seq, x)
    ref = seq(x)
    assert torch.allclose(out, ref)
    grads = torch.autograd.grad(out.sum(), list(seq.parameters()))
    ref_grads = torch.autograd.grad(ref.sum(), list(seq.parameters()))
    assert all(torch.allclose(a, b) for a, b in zip(grads, ref_grads))
    assert torch.allclose(run_layers(seq[0], x), seq[0](x))
