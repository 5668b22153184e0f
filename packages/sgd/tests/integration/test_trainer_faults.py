"""Kill a replica's process in the middle of an epoch, or between calls: the trainer
rebuilds the group, reloads the last epoch's state and finishes the call; training goes
on learning."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from sgd_testing import PauseGate, line_data, linear_model, pause_while_closed

import rayfield as rf
from rayfield.sgd import PyTorchTrainer
from rayfield.sgd.pytorch import training


def pausing_train(model: Any, loader: Any, criterion: Any, optimizer: Any, config: dict) -> dict:
    """The default epoch, except that after its first batch every replica calls
    ``pause_while_closed`` on the ``PauseGate`` in ``config`` (so the test kills a
    replica that is surely in the middle of an epoch)."""

    def batches() -> Any:
        for i, batch in enumerate(loader):
            if i == 1:
                pause_while_closed(config["dir"], config["go"])
            yield batch

    return training.train_epoch(model, batches(), criterion, optimizer, config)


class Setup:
    """One two-replica trainer shared by the module (starting replicas, which import
    torch, is what these tests spend their time on), its pause files and a checkpoint
    of its first state. The test that leaves it with one replica runs last."""

    def __init__(self, folder: Path) -> None:
        self.gate = PauseGate(folder)  # open: epochs run straight through
        self.trainer = PyTorchTrainer(
            linear_model,
            line_data,
            config={"lr": 0.1, "dir": str(folder), "go": str(self.gate.go)},
            num_replicas=2,
            batch_size=32,
            train_function=pausing_train,
            max_retries=2,
            timeout_s=60,
        )
        self.initial = self.trainer.save(str(folder / "initial.pt"))

    def fresh(self) -> PyTorchTrainer:
        """The trainer back at its first state (epoch 0), with no pause markers left."""
        self.gate.reset()
        self.trainer.restore(self.initial)
        return self.trainer


@pytest.fixture(scope="module")
def setup(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    shared = Setup(tmp_path_factory.mktemp("trainer"))
    yield shared
    shared.gate.go.touch()
    shared.trainer.shutdown()


def _pids(trainer: PyTorchTrainer) -> list[int]:
    return rf.get([w.get_pid.remote() for w in trainer.workers])


def _kill_one_mid_epoch(setup: Setup) -> Any:
    """Start an epoch in a thread, kill replica 1 once both replicas are inside it;
    return (thread, result dict, old pids) with the epoch paused until the gate's
    ``release``; ``result["value"]`` will hold the epoch's stats."""
    old_pids = _pids(setup.trainer)
    thread, result = setup.gate.kill_inside(setup.trainer.train, old_pids[1], "replicas at batch 1")
    return thread, result, old_pids


def test_killing_a_replica_mid_epoch_rebuilds_and_resumes(setup: Setup) -> None:
    trainer = setup.fresh()
    failures = trainer.num_failures
    first = trainer.train()
    assert first["epoch"] == 1
    thread, result, old_pids = _kill_one_mid_epoch(setup)
    setup.gate.release(thread, 240)
    stats = result["value"]
    assert trainer.num_failures == failures + 1
    assert stats["epoch"] == 2  # the epoch in progress was run again from epoch 1's state
    assert stats["num_replicas"] == 2 and stats["num_samples"] == 512
    assert not set(_pids(trainer)) & set(old_pids)
    for _ in range(2):
        last = trainer.train()
    assert last["epoch"] == 4
    assert last["train_loss"] < first["train_loss"] / 10
    assert trainer.get_model().weight.item() == pytest.approx(2.0, abs=0.05)


# ------------------------------------------- the other calls survive a dead replica
def _check_validate(trainer: PyTorchTrainer, tmp_path: Path, before: dict[str, Any]) -> None:
    os.kill(_pids(trainer)[1], signal.SIGKILL)
    stats = trainer.validate()
    assert stats["num_samples"] == 128
    assert stats["validation_loss"] == pytest.approx(before["validation_loss"])


def _check_get_model(trainer: PyTorchTrainer, tmp_path: Path, before: dict[str, Any]) -> None:
    os.kill(_pids(trainer)[0], signal.SIGKILL)
    assert trainer.get_model().weight.item() == before["weight"]


def _check_save(trainer: PyTorchTrainer, tmp_path: Path, before: dict[str, Any]) -> None:
    os.kill(_pids(trainer)[0], signal.SIGKILL)
    saved = torch.load(trainer.save(str(tmp_path / "s.pt")), weights_only=True)
    assert saved["epoch"] == 2
    assert saved["models"][0]["weight"].item() == before["weight"]


def _check_restore(trainer: PyTorchTrainer, tmp_path: Path, before: dict[str, Any]) -> None:
    path = trainer.save(str(tmp_path / "r.pt"))
    assert trainer.train()["epoch"] == 3
    os.kill(_pids(trainer)[1], signal.SIGKILL)
    trainer.restore(path)
    assert trainer.get_model().weight.item() == before["weight"]
    assert trainer.train()["epoch"] == 3  # the replicas hold epoch 2's state again


CHECKS: dict[str, Callable[[PyTorchTrainer, Path, dict[str, Any]], None]] = {
    "validate": _check_validate,
    "get_model": _check_get_model,
    "save": _check_save,
    "restore": _check_restore,
}


@pytest.mark.parametrize("call", sorted(CHECKS))
def test_a_call_after_a_replica_died_rebuilds_and_answers(
    setup: Setup, tmp_path: Path, call: str
) -> None:
    """A replica killed between calls: the call rebuilds the replicas from the last
    epoch's state and answers as if nothing happened."""
    trainer = setup.fresh()
    for _ in range(2):
        trainer.train()
    before = {"weight": trainer.get_model().weight.item(), **trainer.validate()}
    failures, old = trainer.num_failures, set(_pids(trainer))
    CHECKS[call](trainer, tmp_path, before)
    assert trainer.num_failures == failures + 1
    assert len(trainer.workers) == 2 and not set(_pids(trainer)) & old


@rf.remote(num_cpus=1)
class CpuHog:
    def ping(self) -> bool:
        return True


def test_rebuild_continues_on_the_resources_left(setup: Setup) -> None:
    """A replica dies and its CPU is taken before the rebuild (as when its node is gone):
    the trainer goes on with one replica, which then reads the whole training set.
    Runs last: the shared trainer keeps one replica after it."""
    trainer = setup.fresh()
    failures = trainer.num_failures
    hog = None
    try:
        first = trainer.train()
        thread, result, _ = _kill_one_mid_epoch(setup)
        hog = CpuHog.remote()
        assert rf.get(hog.ping.remote(), timeout=60)  # the dead replica's CPU is taken
        setup.gate.release(thread, 240)
        stats = result["value"]
        assert trainer.num_failures == failures + 1
        assert stats["num_replicas"] == 1 and len(trainer.workers) == 1
        assert stats["num_samples"] == 512 and stats["epoch"] == 2
        last = trainer.train()
        assert last["train_loss"] < first["train_loss"] / 10
    finally:
        setup.gate.go.touch()
        if hog is not None:
            rf.kill(hog)
