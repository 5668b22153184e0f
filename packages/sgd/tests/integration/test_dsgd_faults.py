"""Kill a DistributedSGD worker's or parameter server's process during a call: the call
replaces it, every worker reloads the last good state, and the call and training go on.

Starting a worker (it imports torch) is what these tests spend their time on, so the
tests share one DistributedSGD per strategy (``"ps"`` tests first, then ``"simple"``):
each test first restores it to the state it had when created (weights, optimizer,
step 0) and counts failures from where it found them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sgd_testing import PauseGate, pausing_line_model

import rayfield as rf
from rayfield.sgd import DistributedSGD


class Setup:
    """A DistributedSGD of ``PausingLineModel``s, their ``PauseGate`` and a checkpoint
    of its first state."""

    def __init__(self, folder: Path, **kwargs: Any) -> None:
        self.gate = PauseGate(folder)
        self.sgd = DistributedSGD(
            pausing_line_model(str(self.gate.dir), str(self.gate.go)),
            num_workers=2,
            max_retries=2,
            timeout_s=30,
            checkpoint_freq=0,  # the driver's copy changes only where a test says
            **kwargs,
        )
        self.initial = self.sgd.save(str(folder / "initial.pt"))

    def fresh(self) -> DistributedSGD:
        """The DistributedSGD, back at its first state, with no pause markers left."""
        self.gate.reset()
        self.sgd.restore(self.initial)
        return self.sgd

    def pids(self) -> tuple[list[int], list[int]]:
        """(worker pids, parameter-server pids)."""
        workers = self.sgd.foreach_worker(lambda w: w.get_pid())
        return workers, rf.get([s.get_pid.remote() for s in self.sgd.ps_actors])

    def close(self) -> None:
        self.gate.go.touch()
        self.sgd.shutdown()


class Setups:
    """One ``Setup`` at a time (the cluster's 2 CPUs hold one DistributedSGD's two
    workers): ``get`` shuts the current one down when a test asks for the other
    strategy, so the tests are ordered by strategy."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.current: Setup | None = None

    def get(self, strategy: str) -> Setup:
        if self.current is not None and self.current.sgd.strategy != strategy:
            self.close()
        if self.current is None:
            # grad_shard_bytes=4: two parameter-server shards with "ps".
            folder = self.factory.mktemp(strategy)
            self.current = Setup(folder, strategy=strategy, grad_shard_bytes=4)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


@pytest.fixture(scope="module")
def setups(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setups]:
    setups = Setups(tmp_path_factory)
    yield setups
    setups.close()


def _weights(sgd: DistributedSGD) -> list[list[float]]:
    return sgd.foreach_model(lambda m: [p.item() for p in m.module.parameters()])


# ----------------------------------------------- the other calls survive a dead worker
def _kill(setup: Setup, index: int) -> int:
    pid = setup.pids()[0][index]
    os.kill(pid, signal.SIGKILL)
    return pid


def _check_foreach_worker(setup: Setup, tmp_path: Path, expected: list[list[float]]) -> None:
    pid = _kill(setup, 0)
    got = setup.sgd.foreach_worker(lambda w: (w.worker_index, w.get_pid(), w.steps))
    assert [index for index, _, _ in got] == [0, 1] and got[0][1] != pid
    assert [steps for _, _, steps in got] == [3, 3]  # the survivor's state
    assert _weights(setup.sgd) == expected


def _check_foreach_model(setup: Setup, tmp_path: Path, expected: list[list[float]]) -> None:
    _kill(setup, 1)
    assert _weights(setup.sgd) == expected


def _check_for_model(setup: Setup, tmp_path: Path, expected: list[list[float]]) -> None:
    _kill(setup, 0)
    assert setup.sgd.for_model(lambda m: [p.item() for p in m.module.parameters()]) == expected[0]


def _check_save(setup: Setup, tmp_path: Path, expected: list[list[float]]) -> None:
    _kill(setup, 0)
    saved = torch.load(setup.sgd.save(str(tmp_path / "s.pt")), weights_only=True)
    assert saved["steps"] == 3
    assert sorted(v.item() for v in saved["weights"].values()) == sorted(expected[0])


def _check_restore(setup: Setup, tmp_path: Path, expected: list[list[float]]) -> None:
    path = setup.sgd.save(str(tmp_path / "r.pt"))
    setup.sgd.step(fetch_stats=True)
    assert _weights(setup.sgd) != expected
    _kill(setup, 1)
    setup.sgd.restore(path)
    assert _weights(setup.sgd) == expected
    assert setup.sgd.foreach_worker(lambda w: w.steps) == [3, 3]


CHECKS: dict[str, Callable[[Setup, Path, list[list[float]]], None]] = {
    "foreach_worker": _check_foreach_worker,
    "foreach_model": _check_foreach_model,
    "for_model": _check_for_model,
    "save": _check_save,
    "restore": _check_restore,
}


@pytest.mark.parametrize("call", sorted(CHECKS))
def test_a_call_after_a_worker_died_rebuilds_and_answers(
    setups: Setups, tmp_path: Path, call: str
) -> None:
    """A worker killed between calls: the call replaces it, loads the survivor's state
    into it and answers as if nothing happened; the next step runs on both."""
    ps = setups.get("ps")
    sgd = ps.fresh()
    for _ in range(3):
        sgd.step(fetch_stats=True)
    expected = _weights(sgd)
    failures = sgd.num_failures
    CHECKS[call](ps, tmp_path, expected)
    assert sgd.num_failures == failures + 1
    assert sgd.step(fetch_stats=True) is not None
    flats = sgd.foreach_worker(lambda w: w.get_flat_weights())
    assert np.array_equal(flats[0], flats[1])


@pytest.mark.parametrize(
    ("strategy", "victim"),
    [("ps", "worker"), ("ps", "server"), ("simple", "worker")],
)
def test_killing_an_actor_mid_step_rebuilds_and_training_goes_on(
    setups: Setups, strategy: str, victim: str
) -> None:
    setup = setups.get(strategy)
    sgd = setup.fresh()
    failures = sgd.num_failures
    first = sgd.step(fetch_stats=True)
    for _ in range(3):
        before = sgd.step(fetch_stats=True)
    assert first is not None and before is not None and before < first
    worker_pids, server_pids = setup.pids()
    pid = worker_pids[1] if victim == "worker" else server_pids[1]

    # Both workers held inside the next step's get_loss when the actor dies.
    gate = setup.gate
    thread, result = gate.kill_inside(lambda: sgd.step(fetch_stats=True), pid, "workers in step")
    gate.release(thread, 180)

    assert sgd.num_failures == failures + 1
    assert result["value"] is not None
    new_worker_pids, new_server_pids = setup.pids()
    if victim == "worker":
        assert new_worker_pids[0] == worker_pids[0] and new_worker_pids[1] != pid
        assert new_server_pids == server_pids
    else:
        assert new_worker_pids == worker_pids
        assert new_server_pids[0] == server_pids[0] and new_server_pids[1] != pid
    # The failed step applied nowhere; the rerun made it the 5th on every worker.
    assert sgd.foreach_worker(lambda w: w.steps) == [5, 5]
    flats = sgd.foreach_worker(lambda w: w.get_flat_weights())
    assert np.array_equal(flats[0], flats[1])

    for _ in range(60):
        last = sgd.step(fetch_stats=True)
    assert last is not None and last < before / 10
    w, b = sgd.for_model(lambda m: [p.item() for p in m.module.parameters()])
    assert w == pytest.approx(0.1, abs=0.02) and b == pytest.approx(0.3, abs=0.02)


def test_a_step_without_survivors_loads_the_drivers_copy(setups: Setups) -> None:
    """Both workers killed between steps: the next step rebuilds them from the state the
    driver kept at the last checkpoint (``checkpoint_freq``), losing the steps after,
    and re-forms their process group."""
    simple = setups.get("simple")
    sgd = simple.fresh()  # restore: the driver's copy is now the first state
    failures = sgd.num_failures
    for _ in range(6):
        sgd.step(fetch_stats=True)
    sgd.checkpoint_freq = 4
    try:
        sgd.num_steps = 3  # the next step is the driver's 4th: it keeps that state
        sgd.step(fetch_stats=True)
        kept = _weights(sgd)
        sgd.step(fetch_stats=True)
        assert _weights(sgd) != kept
        for pid in simple.pids()[0]:
            os.kill(pid, signal.SIGKILL)
        assert sgd.step(fetch_stats=True) is not None
    finally:
        sgd.checkpoint_freq = 0
    assert sgd.num_failures == failures + 1
    # 7 kept, then the rerun step; both workers new and in one group again.
    assert sgd.foreach_worker(lambda w: w.steps) == [8, 8]
    now = _weights(sgd)
    assert now[0] == now[1] and now[0] != kept[0]
