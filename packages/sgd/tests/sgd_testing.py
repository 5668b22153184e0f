"""Creators shared by the tests: a noisy line to regress and the digits to classify."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset


def line_data(config: dict[str, Any]) -> tuple[TensorDataset, TensorDataset]:
    """y = 2x + 1 (+ small noise) on x in [-1, 1]: train 512 samples, validation 128."""
    rng = np.random.default_rng(config.get("data_seed", 0))

    def make(n: int) -> TensorDataset:
        x = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
        y = (2 * x + 1 + rng.normal(0, 0.01, size=(n, 1))).astype(np.float32)
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    return make(config.get("n_train", 512)), make(128)


def linear_model(config: dict[str, Any]) -> torch.nn.Module:
    torch.manual_seed(config.get("model_seed", 0))
    return torch.nn.Linear(1, 1)


class LineModel:
    """A ``rayfield.sgd.Model`` written as the reference's TF example: y = w*x + b fitted
    to ``y = 0.1 x + 0.3`` with its own data, no rayfield base class."""

    def __init__(self, worker_idx: int, device_idx: int) -> None:
        self.module = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.module.parameters(), lr=0.5)
        self.rng = np.random.default_rng(100 * worker_idx + device_idx)

    def get_loss(self) -> torch.Tensor:
        x = torch.from_numpy(self.rng.random((100, 1)).astype(np.float32))
        return torch.nn.functional.mse_loss(self.module(x), 0.1 * x + 0.3)

    def get_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer


class PausingLineModel(LineModel):
    """``LineModel`` whose ``get_loss`` pauses while the file ``go`` is missing: it first
    writes ``<marker_dir>/marker-<pid>``, then waits (at most 60 s) for ``go``. A test
    removes ``go`` to hold every worker inside a step, kills a process, then writes it."""

    def __init__(self, worker_idx: int, device_idx: int, marker_dir: str, go: str) -> None:
        super().__init__(worker_idx, device_idx)
        self.marker_dir, self.go = Path(marker_dir), Path(go)

    def get_loss(self) -> torch.Tensor:
        if not self.go.exists():
            (self.marker_dir / f"marker-{os.getpid()}").touch()
            deadline = time.monotonic() + 60
            while not self.go.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().get_loss()


def pausing_line_model(marker_dir: str, go: str) -> Callable[[int, int], PausingLineModel]:
    """A ``(worker_idx, device_idx)`` model creator of ``PausingLineModel``s."""

    def create(worker_idx: int, device_idx: int) -> PausingLineModel:
        return PausingLineModel(worker_idx, device_idx, marker_dir, go)

    return create
