"""rayfield-sgd's trainables pass Tune's Trainable conformance tests
(`rayfield.tune.testing.TrainableConformance`): the plain `PyTorchTrainable` (the
contract implemented without rayfield-tune) and the class `PyTorchTrainer.as_trainable`
builds (Tune's one adapter of it)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sgd_testing import line_data, linear_model

from rayfield.sgd import PyTorchTrainable, PyTorchTrainer

testing = pytest.importorskip("rayfield.tune.testing")


class TestPlainPyTorchTrainable(testing.TrainableConformance):
    config = {
        "model_creator": linear_model,
        "data_creator": line_data,
        "loss_creator": torch.nn.MSELoss,
        "optimizer_creator": lambda m, c: torch.optim.SGD(m.parameters(), lr=c["lr"]),
        "lr": 0.1,
        "batch_size": 32,
    }

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: Any) -> None:
        """The trainer's replicas are actors."""

    def make_trainable(self, config: dict[str, Any]) -> Any:
        return PyTorchTrainable(config=config)


class TestTuneAdaptedPyTorchTrainable(testing.TrainableConformance):
    config = {"lr": 0.1}

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: Any) -> None:
        """The trainer's replicas are actors."""

    def make_trainable(self, config: dict[str, Any]) -> Any:
        return PyTorchTrainer.as_trainable(linear_model, line_data, batch_size=32)(config=config)
