"""TorchVariables: weights as numpy dicts and flat vectors (no processes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayfield.sgd import TorchVariables, get_weights, set_weights


def _net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_get_set_weights_copies_between_models() -> None:
    a, b = _net(0), _net(1)
    weights = get_weights(a)
    assert set(weights) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert all(isinstance(w, np.ndarray) for w in weights.values())
    x = torch.randn(5, 3)
    assert not torch.allclose(a(x), b(x))
    set_weights(b, weights)
    assert torch.allclose(a(x), b(x))
    weights["0.bias"][:] = 100.0  # a copy: the model is untouched
    assert float(a[0].bias.detach().max()) < 100


def test_set_weights_accepts_a_subset_and_rejects_no_match_or_bad_shape() -> None:
    a = _net(0)
    variables = TorchVariables(a)
    variables.set_weights({"2.bias": np.array([5.0, 6.0], dtype=np.float32)})
    assert a[2].bias.tolist() == [5.0, 6.0]
    with pytest.raises(ValueError, match="No variables"):
        variables.set_weights({"other": np.zeros(2)})
    with pytest.raises(ValueError, match="shape"):
        variables.set_weights({"2.bias": np.zeros(3)})


def test_flat_round_trip_and_size_check() -> None:
    a, b = _net(0), _net(1)
    va, vb = TorchVariables(a), TorchVariables(b)
    assert va.get_flat_size() == 3 * 4 + 4 + 4 * 2 + 2
    flat = va.get_flat()
    assert flat.dtype == np.float32 and flat.shape == (va.get_flat_size(),)
    vb.set_flat(flat)
    assert np.array_equal(vb.get_flat(), flat)
    with pytest.raises(ValueError, match="set_flat got 3"):
        vb.set_flat(np.zeros(3))


def test_buffers_are_included_on_request_and_bad_input_is_refused() -> None:
    bn = torch.nn.BatchNorm1d(2)
    assert "running_mean" in TorchVariables(bn, include_buffers=True).variables
    assert "running_mean" not in TorchVariables(bn).variables
    with pytest.raises(TypeError):
        TorchVariables(3)
    with pytest.raises(TypeError):
        TorchVariables([1, 2])
