"""The Tune trainable around PyTorchTrainer, used without rayfield-tune: iterations are
epochs that learn, trial config keys reach the trainer, checkpoints restore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from sgd_testing import line_data, linear_model

from rayfield.sgd import PyTorchTrainable, PyTorchTrainer
from rayfield.sgd.pytorch.trainable import TrainerTrainableHooks


def test_trial_config_splits_into_trainer_arguments_and_hyperparameters() -> None:
    cls = PyTorchTrainer.as_trainable(linear_model, line_data, config={"lr": 0.5, "a": 1})
    assert issubclass(cls, TrainerTrainableHooks)
    kwargs = cls.trainer_kwargs({"lr": 0.1, "num_replicas": 2, "batch_size": 8})
    assert kwargs == {"config": {"lr": 0.1, "a": 1}, "num_replicas": 2, "batch_size": 8}


def test_as_trainable_trains_checkpoints_and_restores(cluster: Any, tmp_path: Path) -> None:
    cls = PyTorchTrainer.as_trainable(linear_model, line_data, batch_size=32)
    trainable = cls(config={"lr": 0.1, "num_replicas": 2})
    try:
        first = trainable.train()
        assert first["training_iteration"] == 1
        assert first["num_replicas"] == 2
        for _ in range(3):
            last = trainable.train()
        assert last["training_iteration"] == 4
        assert last["mean_loss"] == last["validation_loss"]
        assert last["validation_loss"] < first["validation_loss"] / 10
        path = trainable.save(str(tmp_path))
        assert Path(path).exists()
        trainable.restore(path)
        assert trainable.train()["epoch"] == 5
    finally:
        trainable.stop()


def test_pytorch_trainable_takes_every_argument_from_the_config(cluster: Any) -> None:
    trainable = PyTorchTrainable(
        config={
            "model_creator": linear_model,
            "data_creator": line_data,
            "loss_creator": torch.nn.MSELoss,
            "optimizer_creator": lambda m, c: torch.optim.SGD(m.parameters(), lr=c["lr"]),
            "lr": 0.1,
            "batch_size": 16,
        }
    )
    try:
        losses = [trainable.train()["train_loss"] for _ in range(2)]
        assert losses[1] < losses[0]
    finally:
        trainable.stop()
    with pytest.raises(TypeError):
        PyTorchTrainable(config={"lr": 0.1})  # no creators at all
