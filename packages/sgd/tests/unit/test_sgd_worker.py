"""DistributedSGD's pieces without processes: shards, the parameter server, a worker."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch
from sgd_testing import LineModel, line_data, linear_model

from rayfield.sgd import sgd_mse_optimizer
from rayfield.sgd.collective import GradBuffer
from rayfield.sgd.model import assign_gradient, flat_gradient, model_parameters
from rayfield.sgd.param_server import ParameterServer
from rayfield.sgd.worker import SGDWorker, shard_bounds


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model_creator": linear_model,
        "optimizer_creator": sgd_mse_optimizer,
        "data_creator": line_data,
        "loss_creator": None,
        "config": {"lr": 0.1},
        "devices_per_worker": 1,
        "num_workers": 1,
        "batch_size": 16,
        "grads_per_step": 1,
        "grad_shard_bytes": 10_000_000,
    }
    spec.update(overrides)
    return spec


def test_shard_bounds_cover_the_vector_within_the_byte_limit() -> None:
    bounds = shard_bounds(10, 12)  # 3 float32 per shard at most
    assert bounds[0][0] == 0 and bounds[-1][1] == 10
    assert all(a == b for (_, a), (b, _) in itertools.pairwise(bounds))
    assert all(0 < stop - start <= 3 for start, stop in bounds)
    assert len(bounds) == 4
    assert shard_bounds(5, 10_000_000) == [(0, 5)]
    assert shard_bounds(0, 4) == [(0, 0)]
    with pytest.raises(ValueError):
        shard_bounds(5, 0)


def test_parameter_server_averages_and_checks_its_inputs() -> None:
    server = ParameterServer(num_workers=2)
    first, second = np.array([1.0, 2.0], np.float32), np.array([3.0, 6.0], np.float32)
    out = server.aggregate(first, second)
    assert out.tolist() == [2.0, 4.0]
    assert first.tolist() == [1.0, 2.0]  # inputs untouched
    three = ParameterServer(num_workers=3).aggregate(first, second, np.full(2, 5.0, np.float32))
    assert three.tolist() == pytest.approx([3.0, 13.0 / 3])
    with pytest.raises(ValueError, match="expected 2"):
        server.aggregate(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="shape"):
        server.aggregate(np.zeros(2, np.float32), np.zeros(3, np.float32))


def test_flat_gradient_round_trip() -> None:
    model = torch.nn.Linear(2, 1)
    params = list(model.parameters())
    assign_gradient(params, np.arange(3, dtype=np.float32))
    assert flat_gradient(params).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError):
        assign_gradient(params, np.zeros(4, np.float32))
    # Shards that cut through a parameter are read in place, in order.
    assign_gradient(params, [np.array([5.0], np.float32), np.array([6.0, 7.0], np.float32)])
    assert flat_gradient(params).tolist() == [5.0, 6.0, 7.0]
    big = torch.nn.Linear(3, 2)
    expected = np.arange(8, dtype=np.float32)
    assign_gradient(list(big.parameters()), [expected[a:b] for a, b in shard_bounds(8, 12)])
    assert np.array_equal(flat_gradient(list(big.parameters())), expected)


def test_worker_replicas_average_gradients_and_stay_identical() -> None:
    worker = SGDWorker(0, _spec(devices_per_worker=2))
    worker.set_flat_weights(worker.get_flat_weights())
    first = worker.compute_apply()
    for _ in range(200):
        last = worker.compute_apply()
    assert last < first / 10
    a, b = (list(m.model.parameters()) for m in worker.models)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert worker.foreach_model(lambda m: round(m.weight.item(), 1)) == [2.0, 2.0]


def test_worker_with_a_reference_style_model_and_shards() -> None:
    worker = SGDWorker(0, _spec(model_creator=LineModel, grad_shard_bytes=4))
    assert worker.shard_shapes() == [1, 1]
    for _ in range(300):
        shards = worker.compute_gradient_shards()
        worker.apply_gradients(*shards)
    (w, b) = [p.item() for p in model_parameters(worker.models[0])]
    assert w == pytest.approx(0.1, abs=0.02) and b == pytest.approx(0.3, abs=0.02)


def test_worker_state_round_trip_and_bad_models() -> None:
    worker = SGDWorker(0, _spec())
    worker.compute_apply()
    blob = worker.get_state()
    other = SGDWorker(0, _spec(config={"lr": 0.1, "model_seed": 3}))
    other.set_state(blob)
    assert np.array_equal(other.get_flat_weights(), worker.get_flat_weights())
    assert other.steps == 1
    with pytest.raises(TypeError, match="data_creator"):
        SGDWorker(0, _spec(data_creator=None))
    with pytest.raises(TypeError, match="Model"):
        SGDWorker(0, _spec(model_creator=lambda w, d: 3))


def test_grad_buffer_gradients_are_views_of_one_flat_tensor() -> None:
    module = torch.nn.Linear(3, 2)
    buffer = GradBuffer(list(module.parameters()))
    assert buffer.bound and buffer.numel == 8
    for _ in range(2):  # a second backward accumulates into the same memory
        buffer.zero()
        module(torch.ones(4, 3)).sum().backward()
        module(torch.ones(4, 3)).sum().backward()
        assert buffer.flat.tolist() == [8.0] * 8
    module.zero_grad(set_to_none=True)  # user code drops the views: zero() re-binds them
    buffer.zero()
    module(torch.ones(1, 3)).sum().backward()
    assert buffer.collect().tolist() == [1.0] * 8
    buffer.flat.mul_(3)
    buffer.scatter()
    assert module.bias.grad.tolist() == [3.0, 3.0]


def test_grad_buffer_copies_when_dtypes_differ() -> None:
    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    buffer = GradBuffer([a, b])
    assert not buffer.bound and buffer.flat.dtype == torch.float32
    buffer.zero()
    (a.sum() + 2 * b.sum()).backward()
    assert buffer.collect().tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]
    buffer.flat.fill_(5.0)
    buffer.scatter()
    assert b.grad.dtype == torch.float64 and b.grad.tolist() == [5.0] * 3


def test_grad_buffer_collects_gradients_replaced_after_zero_and_assigns_shards() -> None:
    module = torch.nn.Linear(3, 2)
    buffer = GradBuffer(list(module.parameters()))
    buffer.zero()
    module.zero_grad(set_to_none=True)  # as a get_loss that zeroes its own gradients
    module(torch.ones(1, 3)).sum().backward()
    assert buffer.collect().tolist() == [1.0] * 8
    assert module.weight.grad.data_ptr() == buffer.flat.data_ptr()  # re-bound to its view
    # Shards that cut a parameter in two land in place, one copy each.
    grad = np.arange(8, dtype=np.float32)
    buffer.assign([grad[a:b] for a, b in shard_bounds(8, 12)])
    assert module.weight.grad.flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert module.bias.grad.tolist() == [6.0, 7.0]
    with pytest.raises(ValueError, match="7 values"):
        buffer.assign([grad[:7]])
