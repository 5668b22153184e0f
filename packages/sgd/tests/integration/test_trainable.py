"""The Tune trainable around PyTorchTrainer, used without rayfield-tune: iterations are
epochs that learn, trial config keys reach the trainer, checkpoints restore."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from sgd_testing import line_data, linear_model

from rayfield.sgd import PyTorchTrainable, PyTorchTrainer, Resources
from rayfield.sgd.pytorch.trainable import TrainerTrainableHooks


def test_trial_config_splits_into_trainer_arguments_and_hyperparameters() -> None:
    cls = PyTorchTrainer.as_trainable(linear_model, line_data, config={"lr": 0.5, "a": 1})
    # Tune's adapter of the contract's plain class (rayfield-tune is installed here).
    assert issubclass(cls._inner_cls, TrainerTrainableHooks)
    kwargs = cls.trainer_kwargs({"lr": 0.1, "num_replicas": 2, "batch_size": 8})
    assert kwargs == {"config": {"lr": 0.1, "a": 1}, "num_replicas": 2, "batch_size": 8}


def test_resource_request_reserves_the_replicas_not_the_trial_actor() -> None:
    cls = PyTorchTrainer.as_trainable(linear_model, line_data, num_replicas=2)
    assert cls.default_resource_request({}) == {
        "cpu": 0.0,
        "gpu": 0.0,
        "extra_cpu": 2.0,
        "extra_gpu": 0.0,
    }
    request = cls.default_resource_request(
        {"num_replicas": 3, "resources_per_replica": Resources(num_cpus=2, num_gpus=1)}
    )
    assert request is not None
    assert (request["extra_cpu"], request["extra_gpu"]) == (6.0, 3.0)
    assert cls.default_resource_request({"num_replicas": {"grid_search": [1, 2]}}) is None


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


class MakesMarker:
    """Unpickling this creates the directory ``marker``: proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (self.marker,))


def test_tune_trainable_restores_a_copied_checkpoint_unpickling_nothing(
    cluster: Any, tmp_path: Path
) -> None:
    pytest.importorskip("rayfield.tune")
    cls = PyTorchTrainer.as_trainable(linear_model, line_data, batch_size=32)
    trainable = cls(config={"lr": 0.1})
    try:
        trainable.train()
        saved = Path(trainable.save(str(tmp_path / "run")))
        # someone else's experiment, copied here, with pickles where Tune keeps its own
        copied = tmp_path / "copied"
        shutil.copytree(saved, copied)
        marker = tmp_path / "unpickled"
        for name in (".tune_metadata", "checkpoint_dict.pkl"):
            (copied / name).write_bytes(pickle.dumps(MakesMarker(marker)))
        trainable.restore(str(copied))
        assert trainable.iteration == 1  # the checkpoint's epoch
        assert trainable.train()["training_iteration"] == 2
        blob = {
            "files": {"checkpoint_dict.pkl": pickle.dumps(MakesMarker(marker))},
            "meta": {
                "experiment_id": "x",
                "iteration": 1,
                "timesteps_total": None,
                "time_total": 0.0,
                "episodes_total": None,
                "saved_as_dict": True,
                "relpath": None,
            },
        }
        with pytest.raises(ValueError, match="pickled dict"):
            trainable.restore_from_object(blob)
    finally:
        trainable.stop()
    assert not marker.exists()


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


def test_tune_run_searches_the_learning_rate(cluster: Any, tmp_path: Path) -> None:
    """With rayfield-tune (a sibling in this monorepo, installed by the test session):
    two trials, one replica each, checkpointed every epoch; the better rate wins."""
    tune = pytest.importorskip("rayfield.tune")
    cls = PyTorchTrainer.as_trainable(linear_model, line_data, batch_size=32)
    analysis = tune.run(
        cls,
        config={"lr": tune.grid_search([0.001, 0.1])},
        stop={"training_iteration": 3},
        checkpoint_freq=1,
        local_dir=str(tmp_path),
        verbose=0,
    )
    results = {t.config["lr"]: t.last_result for t in analysis.trials}
    assert all(r["training_iteration"] == 3 for r in results.values())
    assert results[0.1]["validation_loss"] < results[0.001]["validation_loss"] / 10
    assert analysis.get_best_config(metric="validation_loss", mode="min") == {"lr": 0.1}
