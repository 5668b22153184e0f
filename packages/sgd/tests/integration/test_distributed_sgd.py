"""DistributedSGD on a real local cluster: both strategies learn, replicas stay in sync,
the parameter server is sharded, state saves and restores."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sgd_testing import LineModel, line_data, linear_model

from rayfield.exceptions import UnsafeFileError
from rayfield.sgd import DistributedSGD, get_weights, set_weights, sgd_mse_optimizer


def _in_sync(sgd: DistributedSGD) -> bool:
    flats = sgd.foreach_worker(lambda w: w.get_flat_weights())
    return all(np.array_equal(flats[0], f) for f in flats[1:])


def test_reference_example_with_sharded_parameter_server(cluster: Any) -> None:
    sgd = DistributedSGD(
        LineModel, num_workers=2, devices_per_worker=1, strategy="ps", grad_shard_bytes=4
    )
    try:
        assert sgd.num_shards == 2 and len(sgd.ps_actors) == 2
        sgd.warmup()
        first = sgd.step(fetch_stats=True)
        for i in range(150):
            sgd.step(fetch_stats=i % 50 == 0)
        last = sgd.step(fetch_stats=True)
        assert last is not None and first is not None and last < first / 10
        assert _in_sync(sgd)
        w, b = sgd.for_model(lambda m: [p.item() for p in m.module.parameters()])
        assert w == pytest.approx(0.1, abs=0.02) and b == pytest.approx(0.3, abs=0.02)
        assert sgd.foreach_worker(lambda worker: worker.worker_index) == [0, 1]
        assert sgd.foreach_worker(lambda worker: worker.steps) == [152, 152]
    finally:
        sgd.shutdown()


def test_simple_strategy_trains_a_module_on_sharded_data(cluster: Any, tmp_path: Path) -> None:
    sgd = DistributedSGD(
        linear_model,
        num_workers=2,
        strategy="simple",
        optimizer_creator=sgd_mse_optimizer,
        data_creator=line_data,
        batch_size=16,
        config={"lr": 0.1},
    )
    try:
        losses = [sgd.step() for _ in range(80)]
        assert all(loss is not None for loss in losses)
        assert losses[-1] < losses[0] / 10
        assert _in_sync(sgd)
        weights = sgd.foreach_model(get_weights)
        assert len(weights) == 2
        assert weights[0]["weight"].item() == pytest.approx(2.0, abs=0.1)

        path = sgd.save(str(tmp_path / "sgd.pt"))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        shutil.copy(path, tmp_path / "theirs.pt")
        os.chown(tmp_path / "theirs.pt", 4242, 4242)  # another user's file is refused
        with pytest.raises(UnsafeFileError, match="not yours"):
            sgd.restore(str(tmp_path / "theirs.pt"))
        sgd.foreach_model(lambda m: set_weights(m, {"weight": np.zeros((1, 1), np.float32)}))
        assert sgd.for_model(lambda m: m.weight.item()) == 0.0
        sgd.restore(path)
        assert sgd.foreach_model(lambda m: m.weight.item()) == [weights[0]["weight"].item()] * 2
    finally:
        sgd.shutdown()


def test_one_worker_two_devices_averages_locally(cluster: Any) -> None:
    sgd = DistributedSGD(
        linear_model,
        num_workers=1,
        devices_per_worker=2,
        strategy="ps",  # falls back to simple with one worker
        optimizer_creator=sgd_mse_optimizer,
        data_creator=line_data,
        config={"lr": 0.1},
        grads_per_step=2,
    )
    try:
        assert sgd.strategy == "simple" and not sgd.ps_actors
        first = sgd.step(fetch_stats=True)
        for _ in range(60):
            last = sgd.step(fetch_stats=True)
        assert last is not None and first is not None and last < first / 10
        a, b = sgd.foreach_model(get_weights)
        assert all(np.array_equal(a[k], b[k]) for k in a)
    finally:
        sgd.shutdown()


def test_allreduce_step_applies_the_mean_of_every_workers_gradients(cluster: Any) -> None:
    """One collective ``"simple"`` step (two workers, two batches each) moves the weights
    exactly as one process applying the mean of the four batches' gradients: the
    averaging folded into the loss plus the all-reduce SUM give the mean."""
    sgd = DistributedSGD(LineModel, num_workers=2, strategy="simple", grads_per_step=2)
    try:
        start = sgd.for_model(lambda m: [p.detach().clone() for p in m.module.parameters()])
        sgd.step(fetch_stats=True)
        after = sgd.foreach_model(lambda m: [p.detach().clone() for p in m.module.parameters()])
    finally:
        sgd.shutdown()
    grads = []
    for worker_idx in (0, 1):
        model = LineModel(worker_idx, 0)  # the same data stream as that worker's replica
        with torch.no_grad():
            for p, value in zip(model.module.parameters(), start):
                p.copy_(value)
        for _ in range(2):
            model.module.zero_grad()
            model.get_loss().backward()
            grads.append([p.grad.clone() for p in model.module.parameters()])
    mean = [torch.stack(column).mean(dim=0) for column in zip(*grads)]
    expected = [w - 0.5 * g for w, g in zip(start, mean)]  # LineModel's SGD, lr 0.5
    for replica in after:
        for got, want in zip(replica, expected):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_more_workers_than_the_cluster_holds_fail_before_any_starts(cluster: Any) -> None:
    # The module's cluster has 2 CPUs; each worker holds 1 per device.
    too_many = r"num_workers=3 needs 3 CPU \(1 each\), the cluster has 2;"
    with pytest.raises(ValueError, match=too_many):
        DistributedSGD(LineModel, num_workers=3, timeout_s=5)
    with pytest.raises(ValueError, match=r"num_workers=2 needs 4 CPU \(2 each\)"):
        DistributedSGD(LineModel, num_workers=2, devices_per_worker=2, timeout_s=5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_workers": 0}, ValueError, "num_workers"),
        ({"num_workers": 2, "strategy": "allreduce"}, ValueError, "strategy"),
        ({"num_workers": 1, "devices_per_worker": 0}, ValueError, "devices_per_worker"),
        ({"num_workers": 1, "all_reduce_alg": "xring"}, ValueError, "all_reduce_alg"),
        ({"num_workers": 1, "optimizer_creator": 3}, TypeError, "optimizer_creator"),
        ({"num_workers": 1, "config": 3}, TypeError, "config"),
        ({"num_workers": -1}, ValueError, "num_workers must be an int >= 1, got -1"),
        ({"num_workers": 1, "timeout_s": float("nan")}, ValueError, "timeout_s must be a finite"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DistributedSGD(LineModel, **kwargs)
