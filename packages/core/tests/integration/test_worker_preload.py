"""Workers forked from a node's preloading fork server (``worker_preload_modules``): they run
tasks and actors as fresh workers do, with the preloaded modules already imported; their
output, GPU variables and kills behave as for fresh workers; a failed fork server falls back
to fresh workers with a warning."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rayfield as rf
from rayfield._private import context
from rayfield._private.node_manager import worker_pool
from rayfield._private.node_manager.worker_pool import WorkerPool
from rayfield._private.node_manager.zygote import ForkedWorker
from rayfield.testing import wait_for

PRELOADED = "xml.dom.minidom"  # a module no worker imports by itself


@pytest.fixture(scope="module")
def preloaded() -> Iterator[Any]:
    """A local cluster whose workers are forked from a zygote; yields its node."""
    rf.init(num_cpus=2, num_gpus=1, worker_preload_modules=[PRELOADED], configure_logging=False)
    node = context.current().node  # type: ignore[union-attr]
    wait_for(lambda: node.pool.zygote_state.phase == "ready", 60, "the zygote to get ready")
    yield node
    rf.shutdown()


@rf.remote
def describe() -> dict[str, Any]:
    mask = os.umask(0o022)
    os.umask(mask)
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "preloaded": PRELOADED in sys.modules,
        "group_leader": os.getpgid(0) == os.getpid(),
        "same_session": os.getsid(0) == os.getsid(os.getppid()),
        "umask": mask,
        "gpus_env": os.environ.get("RAYFIELD_NODE_GPUS"),
        "random": _draws(),
    }


def _draws() -> tuple[float, float]:
    import random

    import numpy as np

    return random.random(), float(np.random.random())


def test_tasks_run_in_forked_workers_with_the_modules_imported(preloaded: Any) -> None:
    zygote_pid = preloaded.pool.zygote.proc.pid
    infos = rf.get([describe.options(num_cpus=1).remote() for _ in range(2)])
    for info in infos:
        assert info["ppid"] == zygote_pid and info["preloaded"]
        assert info["group_leader"] and info["same_session"] and info["umask"] == 0o077
        assert info["gpus_env"] == "1.0"
        assert isinstance(preloaded.pool.procs[info["pid"]], ForkedWorker)


def test_forked_workers_have_their_own_random_state(preloaded: Any) -> None:
    @rf.remote
    class Sampler:
        def draw(self) -> tuple[int, tuple[float, float]]:
            return os.getpid(), _draws()

    a, b = Sampler.remote(), Sampler.remote()
    (pid_a, draw_a), (pid_b, draw_b) = rf.get([a.draw.remote(), b.draw.remote()])
    assert pid_a != pid_b and draw_a != draw_b
    rf.kill(a)
    rf.kill(b)


def test_a_gpu_task_sees_its_device(preloaded: Any) -> None:
    @rf.remote(num_gpus=1)
    def visible() -> tuple[str | None, list[Any], int]:
        return os.environ.get("CUDA_VISIBLE_DEVICES"), rf.get_gpu_ids(), os.getppid()

    devices, ids, ppid = rf.get(visible.remote())
    assert devices == "0" and ids == [0] and ppid == preloaded.pool.zygote.proc.pid


def test_a_killed_actor_s_forked_worker_exits(preloaded: Any) -> None:
    @rf.remote
    class Holder:
        def pid(self) -> int:
            return os.getpid()

    holder = Holder.remote()
    pid = rf.get(holder.pid.remote())
    proc = preloaded.pool.procs[pid]
    assert isinstance(proc, ForkedWorker) and proc.poll() is None
    rf.kill(holder)
    wait_for(lambda: proc.poll() is not None, 10, "the killed actor's worker to exit")


def test_forked_worker_output_is_logged_with_its_pid(preloaded: Any, capfd: Any) -> None:
    @rf.remote
    def talk() -> int:
        print("hello from a forked worker")
        return os.getpid()

    pid = rf.get(talk.remote())
    line = f"(pid={pid}, ip=127.0.0.1) hello from a forked worker"
    seen: list[str] = []  # everything printed so far (other workers may print too)

    def printed() -> bool:
        seen.append(capfd.readouterr().out)
        return line in "".join(seen)

    wait_for(printed, 10, "the worker's output on the driver")
    log = preloaded.session_dir / "logs" / f"worker-{pid}.out"
    wait_for(lambda: log.exists() and "hello from a forked worker" in log.read_text(), 10)


def test_a_dead_zygote_makes_the_pool_spawn_fresh_workers_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool without a node: its workers find no socket and exit, which is enough to
    see how they were started and where their output went (none is replaced: without a
    node no worker ever registers)."""
    caplog.set_level(logging.WARNING, "rayfield")
    monkeypatch.setattr(worker_pool, "MAX_FAILED_STARTS", 0)
    pool = WorkerPool(
        str(tmp_path / "node.sock"),
        tmp_path,
        cap=4,
        log_to_driver=False,
        preload_modules=["json", "no_such_module_rf"],
    )
    added: list[Any] = []  # every worker started (the pool forgets those that exited)
    add = pool._add

    def record(proc: Any, counted: bool) -> bool:
        added.append(proc)
        return add(proc, counted)

    monkeypatch.setattr(pool, "_add", record)
    try:
        pool.start(1)
        forked = wait_for(lambda: list(added), 60, "a forked worker")[0]
        assert isinstance(forked, ForkedWorker)
        assert "no_such_module_rf could not be imported" in caplog.text
        out = tmp_path / f"worker-{forked.pid}.out"
        wait_for(lambda: out.exists() and "Error" in out.read_text(), 20, "its traceback")
        assert pool.zygote is not None
        pool.zygote.proc.kill()
        pool.zygote.proc.wait()
        pool.start(1)
        wait_for(lambda: len(added) == 2, 20, "a second worker")
        assert not isinstance(added[1], ForkedWorker)
        assert "worker preload is off from now on" in caplog.text
        wait_for(lambda: all(p.poll() is not None for p in added), 20, "both to exit")
    finally:
        pool.stop()
