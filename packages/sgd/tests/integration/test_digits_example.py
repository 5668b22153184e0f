"""The digits example learns: PyTorchTrainer on two replicas and DistributedSGD under both
strategies reach 97% test accuracy on held-out digits."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# Importable here and (through the driver's sys.path) in the workers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import digits_cnn


def test_pytorch_trainer_two_replicas_reaches_97_percent(cluster: Any) -> None:
    result = digits_cnn.train_with_trainer(epochs=15, num_replicas=2)
    assert result["accuracy"] >= 0.97
    assert result["samples_per_s"] > 0


# "simple" learns the same way (tested quickly on a line in test_distributed_sgd.py); the
# digits run of each strategy mostly pays for starting torch in two new processes.
@pytest.mark.parametrize("strategy", ["ps", pytest.param("simple", marks=pytest.mark.slow)])
def test_distributed_sgd_reaches_97_percent(cluster: Any, strategy: str) -> None:
    result = digits_cnn.train_with_distributed_sgd(strategy, steps=300)
    assert result["accuracy"] >= 0.97


def test_untrained_model_is_at_chance() -> None:
    # The accuracy above is learned: the same network untrained is near 10%.
    assert digits_cnn.test_accuracy(digits_cnn.digits_cnn()) < 0.3
