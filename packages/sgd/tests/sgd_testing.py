"""Creators shared by the tests (a noisy line to regress) and the pause gate of the fault
tests."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from rayfield.testing import wait_for


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


def pause_while_closed(marker_dir: str | Path, go: str | Path) -> None:
    """Called inside an actor: while the file ``go`` is missing, write
    ``<marker_dir>/marker-<pid>`` and wait (at most 60 s, then TimeoutError) for ``go``
    to appear."""
    go = Path(go)
    if go.exists():
        return
    (Path(marker_dir) / f"marker-{os.getpid()}").touch()
    wait_for(go.exists, 60, f"{go} (the test opens the gate)", interval=0.01)


class PauseGate:
    """A folder and its ``go`` file, through which a test holds actors inside a call:
    actor code calls ``pause_while_closed(gate.dir, gate.go)``, which waits while ``go``
    is missing (the gate starts open)."""

    def __init__(self, folder: Path) -> None:
        self.dir, self.go = folder, folder / "go"
        self.go.touch()

    def reset(self) -> None:
        """Open, with no markers left from an earlier pause."""
        self.go.touch()
        for marker in self.dir.glob("marker-*"):
            marker.unlink()

    def kill_inside(
        self, call: Callable[[], Any], pid: int, what: str, held: int = 2
    ) -> tuple[threading.Thread, dict[str, Any]]:
        """Close the gate, start ``call()`` in a thread, wait until ``held`` actors are
        paused inside it, then SIGKILL process ``pid``. The call stays paused until
        ``release``; returns ``(thread, result)``, where ``result["value"]`` will hold
        the call's return value."""
        self.go.unlink()
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(value=call()))
        thread.start()
        wait_for(lambda: len(list(self.dir.glob("marker-*"))) == held, 60, what)
        os.kill(pid, signal.SIGKILL)
        return thread, result

    def release(self, thread: threading.Thread, timeout_s: float) -> None:
        """Open the gate and wait for ``thread`` (from ``kill_inside``) to finish.

        Raises:
            AssertionError: the call did not return within ``timeout_s`` seconds.
        """
        self.go.touch()
        thread.join(timeout=timeout_s)
        assert not thread.is_alive(), "the call did not return after its actor died"


class PausingLineModel(LineModel):
    """``LineModel`` whose ``get_loss`` first calls ``pause_while_closed`` (a
    ``PauseGate``'s folder and go file), so a test can hold every worker inside a step,
    kill a process, then let the step go on."""

    def __init__(self, worker_idx: int, device_idx: int, marker_dir: str, go: str) -> None:
        super().__init__(worker_idx, device_idx)
        self.marker_dir, self.go = marker_dir, go

    def get_loss(self) -> torch.Tensor:
        pause_while_closed(self.marker_dir, self.go)
        return super().get_loss()


def pausing_line_model(marker_dir: str, go: str) -> Callable[[int, int], PausingLineModel]:
    """A ``(worker_idx, device_idx)`` model creator of ``PausingLineModel``s."""

    def create(worker_idx: int, device_idx: int) -> PausingLineModel:
        return PausingLineModel(worker_idx, device_idx, marker_dir, go)

    return create


def line_trainer(**kwargs: Any) -> Any:
    """A PyTorchTrainer of 2 one-CPU replicas regressing the line (``kwargs`` added)."""
    from rayfield.sgd import PyTorchTrainer, Resources
    from rayfield.sgd.pytorch import utils

    return PyTorchTrainer(
        linear_model,
        line_data,
        optimizer_creator=utils.sgd_mse_optimizer,
        config={"lr": 0.1},
        num_replicas=2,
        resources_per_replica=Resources(num_cpus=1),
        batch_size=32,
        **kwargs,
    )


def assert_steps_learn(sgd: Any, steps: int) -> None:
    """``steps`` DistributedSGD steps cut the loss of the first tenfold."""
    first = last = sgd.step(fetch_stats=True)
    for _ in range(steps):
        last = sgd.step(fetch_stats=True)
    assert first is not None and last is not None and last < first / 10
