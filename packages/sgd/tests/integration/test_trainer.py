"""PyTorchTrainer on a real local cluster: two replicas in a gloo process group learn,
validate, save and restore; bad arguments are refused before any actor starts."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
import torch
from sgd_testing import line_data, line_trainer, linear_model

import rayfield as rf
from rayfield.exceptions import UnsafeFileError
from rayfield.sgd import PyTorchTrainer, Resources


def test_two_replicas_learn_a_line_and_checkpoint(cluster: Any, tmp_path: Path) -> None:
    trainer = line_trainer()
    try:
        pids = set(rf.get([w.get_pid.remote() for w in trainer.workers]))
        assert len(pids) == 2
        first = trainer.train()
        assert first["num_samples"] == 512  # each replica read its half of the data
        assert first["num_replicas"] == 2 and first["epoch"] == 1
        for _ in range(4):
            last = trainer.train()
        assert last["epoch"] == 5
        assert last["train_loss"] < first["train_loss"] / 10
        val = trainer.validate()
        assert val["num_samples"] == 128 and val["validation_loss"] < 0.01
        model = trainer.get_model()
        assert isinstance(model, torch.nn.Linear)
        assert model.weight.item() == pytest.approx(2.0, abs=0.05)
        assert model.bias.item() == pytest.approx(1.0, abs=0.05)

        path = trainer.save(str(tmp_path / "ckpt.pt"))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        saved = torch.load(path, weights_only=True)
        assert saved["epoch"] == 5 and len(saved["models"]) == 1
        # Another user's file, or a symlink planted where a checkpoint was, is refused.
        shutil.copy(path, tmp_path / "theirs.pt")
        os.chown(tmp_path / "theirs.pt", 4242, 4242)
        with pytest.raises(UnsafeFileError, match="not yours"):
            trainer.restore(str(tmp_path / "theirs.pt"))
        (tmp_path / "link.pt").symlink_to(path)
        with pytest.raises(UnsafeFileError, match="symlink"):
            trainer.restore(str(tmp_path / "link.pt"))
        # Scramble the weights, then restore: the replicas hold the saved ones again.
        torch.save({"weight": torch.zeros(1, 1), "bias": torch.zeros(1)}, tmp_path / "zero.pt")
        trainer.restore(str(tmp_path / "zero.pt"))
        assert trainer.get_model().weight.item() == 0.0
        trainer.restore(path)
        assert trainer.get_model().weight.item() == pytest.approx(model.weight.item())
        assert trainer.validate()["validation_loss"] == pytest.approx(val["validation_loss"])
    finally:
        trainer.shutdown()


def test_one_replica_without_process_group_learns(cluster: Any) -> None:
    trainer = PyTorchTrainer(
        linear_model,
        line_data,
        loss_creator=torch.nn.MSELoss,
        optimizer_creator=lambda m, c: torch.optim.SGD(m.parameters(), lr=c["lr"]),
        config={"lr": 0.1},
        batch_size=16,
    )
    try:
        losses = [trainer.train()["train_loss"] for _ in range(3)]
        assert losses[-1] < losses[0] / 10
    finally:
        trainer.shutdown()


def test_a_gpu_replica_on_a_cpu_cluster_fails_at_once(cluster: Any) -> None:
    # The reference's example asks Resources(num_gpus=1); without GPUs: a clear error.
    with pytest.raises(ValueError, match="GPU=1"):
        PyTorchTrainer(
            linear_model, line_data, num_replicas=2, resources_per_replica=Resources(num_gpus=1)
        )


def test_more_replicas_than_the_cluster_holds_fail_before_any_starts(cluster: Any) -> None:
    # The module's cluster has 2 CPUs; each replica holds 1.
    with pytest.raises(
        ValueError, match=r"num_replicas=3 needs 3 CPU \(1 each\), the cluster has 2"
    ):
        PyTorchTrainer(linear_model, line_data, num_replicas=3, startup_timeout_s=5)
    with pytest.raises(ValueError, match=r"num_replicas=1000000000 needs 1e\+09 CPU"):
        PyTorchTrainer(linear_model, line_data, num_replicas=10**9)


def test_user_code_errors_are_raised_not_retried(cluster: Any) -> None:
    def broken_data(config: dict[str, Any]) -> Any:
        raise ValueError("no data here")

    with pytest.raises(ValueError, match="no data here"):
        PyTorchTrainer(linear_model, broken_data, num_replicas=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_replicas": 0}, ValueError, "num_replicas"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"backend": "tcp"}, ValueError, "backend"),
        ({"backend": "nccl"}, ValueError, "GPUs"),
        ({"config": [1]}, TypeError, "config"),
        ({"config": torch.nn.MSELoss}, TypeError, "loss_creator"),
        ({"resources_per_replica": {"num_cpus": 1}}, TypeError, "Resources"),
        ({"resources_per_replica": Resources(num_cpus=-1)}, ValueError, "num_cpus"),
        ({"scheduler_step_freq": "never"}, ValueError, "scheduler_step_freq"),
        ({"max_retries": -1}, ValueError, "max_retries"),
        ({"num_replicas": -2}, ValueError, "num_replicas must be an int >= 1, got -2"),
        ({"timeout_s": float("nan")}, ValueError, "timeout_s must be a finite number"),
        ({"startup_timeout_s": 0}, ValueError, "startup_timeout_s must be a finite number"),
        ({"train_function": 3}, TypeError, "train_function"),
    ],
)
def test_bad_arguments_are_refused_before_starting(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PyTorchTrainer(linear_model, line_data, **kwargs)
