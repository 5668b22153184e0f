"""Resources, batch splitting and stats averaging (no processes)."""

from __future__ import annotations

import logging

import pytest

from rayfield.sgd import Resources, sgd_mse_optimizer
from rayfield.sgd.utils import (
    aggregate_stats,
    check_distinct_gpus,
    check_fits,
    check_fits_all,
    check_seconds,
    find_free_port,
    split_batch_size,
)


def test_split_batch_size_divides_evenly_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert split_batch_size(64, 2) == 32
    assert not caplog.records


def test_split_batch_size_rounds_down_with_the_reference_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert split_batch_size(17, 4) == 4
    assert "Changing batch size from 17 to 16 to evenly distribute batches across 4 replicas" in (
        caplog.text
    )
    assert split_batch_size(3, 8) == 1  # never zero


@pytest.mark.parametrize(
    ("args", "error"),
    [((0, 1), ValueError), ((8, 0), ValueError), ((8.0, 1), TypeError), ((True, 1), TypeError)],
)
def test_split_batch_size_rejects_bad_input(args: tuple, error: type) -> None:
    with pytest.raises(error):
        split_batch_size(*args)


def test_aggregate_stats_weights_by_samples_and_sums_them() -> None:
    out = aggregate_stats(
        [
            {"train_loss": 1.0, "num_samples": 30, "epoch_time_s": 2.0, "tag": "a"},
            {"train_loss": 3.0, "num_samples": 10, "epoch_time_s": 4.0, "tag": "b"},
        ]
    )
    assert out["num_samples"] == 40
    assert out["train_loss"] == pytest.approx((1.0 * 30 + 3.0 * 10) / 40)
    assert out["epoch_time_s"] == pytest.approx((2.0 * 30 + 4.0 * 10) / 40)
    assert out["tag"] == "a"


def test_aggregate_stats_plain_mean_without_samples_and_rejects_empty() -> None:
    assert aggregate_stats([{"loss": 1.0}, {"loss": 2.0}])["loss"] == pytest.approx(1.5)
    with pytest.raises(ValueError):
        aggregate_stats([])


def test_resources_defaults_options_and_validation() -> None:
    assert Resources() == Resources(num_cpus=1, num_gpus=0, resources=None)
    assert Resources(num_gpus=1).actor_options() == {"num_cpus": 1, "num_gpus": 1}
    assert Resources(2, 0, {"a": 1}).actor_options()["resources"] == {"a": 1}
    with pytest.raises(ValueError, match="num_cpus"):
        Resources(num_cpus=-1).validate()
    with pytest.raises(TypeError, match="num_gpus"):
        Resources(num_gpus="1").validate()  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="resources"):
        Resources(resources=[1]).validate()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_cpus must be a finite number >= 0, got nan"):
        Resources(num_cpus=float("nan")).validate()
    with pytest.raises(ValueError, match=r"resources\['a'\] must be a finite number >= 0"):
        Resources(resources={"a": float("inf")}).validate()


def test_sgd_mse_optimizer_uses_the_config_learning_rate() -> None:
    import torch

    model = torch.nn.Linear(2, 1)
    loss, optimizer = sgd_mse_optimizer(model, {"lr": 0.5})
    assert isinstance(loss, torch.nn.MSELoss)
    assert isinstance(optimizer, torch.optim.SGD)
    assert optimizer.param_groups[0]["lr"] == 0.5
    assert sgd_mse_optimizer(model, {})[1].param_groups[0]["lr"] == 0.01


def test_find_free_port_can_be_bound() -> None:
    import socket

    port = find_free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_check_fits_names_the_missing_resource() -> None:
    total = {"CPU": 2.0, "custom": 1.0}
    check_fits({"num_cpus": 2, "num_gpus": 0, "resources": {"custom": 1}}, total, "a replica")
    with pytest.raises(ValueError, match="a replica needs GPU=1 but the cluster has 0"):
        check_fits(Resources(num_gpus=1).actor_options(), total, "a replica")
    with pytest.raises(ValueError, match="CPU=3"):
        check_fits({"num_cpus": 3}, total, "a worker")


def test_check_fits_all_counts_every_actor_against_the_cluster() -> None:
    total = {"CPU": 2.0, "GPU": 1.0, "custom": 3.0}
    check_fits_all({"num_cpus": 1}, 2, total, "num_replicas")
    check_fits_all({"num_cpus": 0.5, "num_gpus": 0.5}, 2, total, "num_replicas")
    with pytest.raises(
        ValueError,
        match=r"num_replicas=1000000000 needs 1e\+09 CPU \(1 each\), the cluster has 2; "
        r"lower num_replicas to at most 2",
    ):
        check_fits_all({"num_cpus": 1}, 10**9, total, "num_replicas")
    with pytest.raises(ValueError, match=r"num_workers=3 needs 1.5 GPU \(0.5 each\)"):
        check_fits_all({"num_cpus": 0, "num_gpus": 0.5}, 3, total, "num_workers")
    with pytest.raises(ValueError, match=r"needs 4 custom \(2 each\), the cluster has 3"):
        check_fits_all({"num_cpus": 0, "resources": {"custom": 2}}, 2, total, "num_replicas")


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, ValueError),
        (-1.0, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        ("5", TypeError),
        (True, TypeError),
    ],
)
def test_check_seconds_refuses_what_is_not_a_positive_finite_number(
    value: object, error: type
) -> None:
    with pytest.raises(error, match=r"timeout_s must be a (finite )?number of seconds > 0"):
        check_seconds("timeout_s", value)
    assert check_seconds("timeout_s", 2) == 2.0


def test_check_distinct_gpus_refuses_two_nccl_ranks_on_one_gpu() -> None:
    whole = [("node-a", [0]), ("node-a", [1]), ("node-b", [0])]
    check_distinct_gpus(whole, "nccl")  # one GPU per rank: fine
    shared = [("node-a", [0]), ("node-b", [0]), ("node-a", [0])]
    with pytest.raises(ValueError, match=r"replicas 0 and 2 share GPU 0 of node node-a.*gloo"):
        check_distinct_gpus(shared, "nccl")
    check_distinct_gpus(shared, "gloo")  # gloo runs ranks that share a device
