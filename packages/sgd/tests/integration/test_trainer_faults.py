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


def test_killing_a_replica_mid_epoch_rebuilds_and_resumes(cluster: Any, tmp_path: Path) -> None:
    go = tmp_path / "go"
    go.touch()  # the first epoch runs straight through
    trainer = PyTorchTrainer(
        linear_model,
        line_data,
        config={"lr": 0.1, "dir": str(tmp_path), "go": str(go)},
        num_replicas=2,
        batch_size=32,
        train_function=pausing_train,
        max_retries=2,
        timeout_s=60,
    )
    try:
        first = trainer.train()
        assert first["epoch"] == 1
        old_pids = rf.get([w.get_pid.remote() for w in trainer.workers])
        go.unlink()
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(trainer.train()))
        thread.start()
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("marker-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(list(tmp_path.glob("marker-*"))) == 2, "the replicas never reached batch 1"
        os.kill(old_pids[1], signal.SIGKILL)
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
