"""Kill a replica's process in the middle of an epoch: the trainer rebuilds the group,
reloads the last epoch's state and finishes the epoch; training goes on learning."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sgd_testing import line_data, linear_model

import rayfield as rf
from rayfield.sgd import PyTorchTrainer
from rayfield.sgd.pytorch import training
from rayfield.testing import wait_for


def pausing_train(model: Any, loader: Any, criterion: Any, optimizer: Any, config: dict) -> dict:
    """The default epoch, except that while ``config["go"]`` does not exist, every replica
    writes ``marker-<pid>`` after its first batch and waits for the go file (so the test
    kills a replica that is surely in the middle of an epoch)."""
    marker_dir, go = Path(config["dir"]), Path(config["go"])

    def batches() -> Any:
        for i, batch in enumerate(loader):
            if i == 1 and not go.exists():
                (marker_dir / f"marker-{os.getpid()}").touch()
                deadline = time.monotonic() + 60
                while not go.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            yield batch

    return training.train_epoch(model, batches(), criterion, optimizer, config)


def _trainer(tmp_path: Path, **kwargs: Any) -> tuple[PyTorchTrainer, Path]:
    go = tmp_path / "go"
    go.touch()  # epochs run straight through until the test removes it
    trainer = PyTorchTrainer(
        linear_model,
        line_data,
        config={"lr": 0.1, "dir": str(tmp_path), "go": str(go)},
        num_replicas=2,
        batch_size=32,
        train_function=pausing_train,
        max_retries=2,
        timeout_s=60,
        **kwargs,
    )
    return trainer, go


def _kill_one_mid_epoch(trainer: PyTorchTrainer, tmp_path: Path, go: Path) -> Any:
    """Start an epoch in a thread, kill replica 1 once both replicas are inside it;
    return (thread, result dict, old pids) with the epoch paused until ``go`` exists."""
    old_pids = rf.get([w.get_pid.remote() for w in trainer.workers])
    go.unlink()
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(trainer.train()))
    thread.start()
    wait_for(lambda: len(list(tmp_path.glob("marker-*"))) == 2, 60, "both replicas at batch 1")
    os.kill(old_pids[1], signal.SIGKILL)
    return thread, result, old_pids


def test_killing_a_replica_mid_epoch_rebuilds_and_resumes(cluster: Any, tmp_path: Path) -> None:
    trainer, go = _trainer(tmp_path)
    try:
        first = trainer.train()
        assert first["epoch"] == 1
        thread, result, old_pids = _kill_one_mid_epoch(trainer, tmp_path, go)
        go.touch()
        thread.join(timeout=240)
        assert not thread.is_alive(), "train() did not finish after the replica died"
        assert trainer.num_failures == 1
        assert result["epoch"] == 2  # the epoch in progress was run again from epoch 1's state
        assert result["num_replicas"] == 2 and result["num_samples"] == 512
        new_pids = rf.get([w.get_pid.remote() for w in trainer.workers])
        assert not set(new_pids) & set(old_pids)
        for _ in range(2):
            last = trainer.train()
        assert last["epoch"] == 4
        assert last["train_loss"] < first["train_loss"] / 10
        assert trainer.get_model().weight.item() == pytest.approx(2.0, abs=0.05)
    finally:
        go.touch()
        trainer.shutdown()


@rf.remote(num_cpus=1)
class CpuHog:
    def ping(self) -> bool:
        return True


def test_rebuild_continues_on_the_resources_left(cluster: Any, tmp_path: Path) -> None:
    """A replica dies and its CPU is taken before the rebuild (as when its node is gone):
    the trainer goes on with one replica, which then reads the whole training set."""
    trainer, go = _trainer(tmp_path)
    hog = None
    try:
        first = trainer.train()
        thread, result, _ = _kill_one_mid_epoch(trainer, tmp_path, go)
        hog = CpuHog.remote()
        assert rf.get(hog.ping.remote(), timeout=60)  # the dead replica's CPU is taken
        go.touch()
        thread.join(timeout=240)
        assert not thread.is_alive(), "train() did not finish after the replica died"
        assert trainer.num_failures == 1
        assert result["num_replicas"] == 1 and len(trainer.workers) == 1
        assert result["num_samples"] == 512 and result["epoch"] == 2
        last = trainer.train()
        assert last["train_loss"] < first["train_loss"] / 10
    finally:
        go.touch()
        trainer.shutdown()
        if hog is not None:
            rf.kill(hog)
