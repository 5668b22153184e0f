"""Kill a DistributedSGD worker's or parameter server's process in the middle of a step:
the step replaces it, every worker reloads the last good state, and training goes on."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sgd_testing import pausing_line_model

import rayfield as rf
from rayfield.sgd import DistributedSGD
from rayfield.testing import wait_for


@pytest.mark.parametrize(
    ("strategy", "victim"),
    [("ps", "worker"), ("ps", "server"), ("simple", "worker")],
)
def test_killing_an_actor_mid_step_rebuilds_and_training_goes_on(
    cluster: Any, tmp_path: Path, strategy: str, victim: str
) -> None:
    go = tmp_path / "go"
    go.touch()
    sgd = DistributedSGD(
        pausing_line_model(str(tmp_path), str(go)),
        num_workers=2,
        strategy=strategy,
        grad_shard_bytes=4,  # two parameter-server shards with "ps"
        max_retries=2,
        timeout_s=30,
    )
    try:
        first = sgd.step(fetch_stats=True)
        for _ in range(3):
            before = sgd.step(fetch_stats=True)
        assert first is not None and before is not None and before < first
        worker_pids = sgd.foreach_worker(lambda w: w.get_pid())
        server_pids = rf.get([s.get_pid.remote() for s in sgd.ps_actors])
        pid = worker_pids[1] if victim == "worker" else server_pids[1]

        go.unlink()  # hold both workers inside the next step's get_loss
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(loss=sgd.step(fetch_stats=True)))
        thread.start()
        wait_for(lambda: len(list(tmp_path.glob("marker-*"))) == 2, 60, "both workers in a step")
        os.kill(pid, signal.SIGKILL)
        go.touch()
        thread.join(timeout=180)
        assert not thread.is_alive(), "step() did not return after an actor died"

        assert sgd.num_failures == 1
        assert result["loss"] is not None
        new_worker_pids = sgd.foreach_worker(lambda w: w.get_pid())
        new_server_pids = rf.get([s.get_pid.remote() for s in sgd.ps_actors])
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
    finally:
        go.touch()
        sgd.shutdown()


def test_a_step_without_survivors_loads_the_drivers_copy(cluster: Any, tmp_path: Path) -> None:
    """One worker, killed between steps: the next step rebuilds it from the state the
    driver kept at the last checkpoint (``checkpoint_freq``), losing the steps after."""
    go = tmp_path / "go"
    go.touch()
    sgd = DistributedSGD(
        pausing_line_model(str(tmp_path), str(go)),
        num_workers=1,
        strategy="simple",
        checkpoint_freq=4,
        max_retries=1,
    )
    try:
        for _ in range(6):
            sgd.step(fetch_stats=True)
        kept = sgd.for_model(lambda m: [p.item() for p in m.module.parameters()])
        [pid] = sgd.foreach_worker(lambda w: w.get_pid())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _answers(sgd.workers[0]), 30, "the worker is dead")
        assert sgd.step(fetch_stats=True) is not None
        assert sgd.num_failures == 1
        assert sgd.foreach_worker(lambda w: w.steps) == [5]  # 4 kept, then the rerun step
        assert sgd.for_model(lambda m: [p.item() for p in m.module.parameters()]) != kept
    finally:
        sgd.shutdown()


def _answers(actor: Any) -> bool:
    try:
        rf.get(actor.get_pid.remote(), timeout=5)
        return True
    except Exception:
        return False
