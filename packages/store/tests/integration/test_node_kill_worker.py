"""The host kills a worker process with a reason: running_tasks() and kill_worker()."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

from rayfield.store import StoreClient
from rayfield.store.testing import wait_for

WORKER = textwrap.dedent(
    """
    import os, sys, time
    from rayfield.store import StoreClient
    w = StoreClient(sys.argv[1], kind="worker")
    w.register_worker(os.urandom(20))
    while True:
        if w.next_task(timeout_s=1) is not None:
            print("running", flush=True)
            time.sleep(60)
    """
)


def test_kill_worker_fails_unretried_tasks_with_the_given_reason(node: Any) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, node.socket_path], stdout=subprocess.PIPE, env=env
        )
        for _ in range(2)
    ]
    try:
        with StoreClient(node.socket_path) as driver:
            plain, retried = os.urandom(20), os.urandom(20)
            driver.submit_task(os.urandom(20), b"p", resources={"CPU": 1}, return_ids=[plain])
            driver.submit_task(
                os.urandom(20), b"r", resources={"CPU": 1}, return_ids=[retried], max_retries=1
            )
            wait_for(lambda: len(node.running_tasks()) == 2, 20, "both tasks running")
            tasks = sorted(node.running_tasks(), key=lambda t: t["dispatch_seq"])
            assert [t["retriable"] for t in tasks] == [False, True]
            assert {t["pid"] for t in tasks} == {p.pid for p in procs}
            assert not node.kill_worker(os.getpid(), "OUT_OF_MEMORY", "no")  # not a worker
            assert node.kill_worker(tasks[0]["pid"], "OUT_OF_MEMORY", "killed for a test")
            [buf] = driver.get([plain], timeout_s=10)
            assert buf is not None and buf.metadata == b"OUT_OF_MEMORY"
            assert bytes(buf).startswith(b"killed for a test (task ")
            buf.release()
            # The retriable task loses its worker too: resubmitted, it waits for another.
            assert node.kill_worker(tasks[1]["pid"], "OUT_OF_MEMORY", "killed for a test")
            wait_for(lambda: not node.running_tasks(), message="no task running")
            assert [n for n in node.poll_events() if n[0] == "need_worker"]
            assert driver.get([retried], timeout_s=0) == [None]
    finally:
        for p in procs:
            p.kill()
            p.wait()
            assert p.stdout is not None
            p.stdout.close()


def test_worker_holdings_and_a_kill_without_retry(node: Any) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, node.socket_path], stdout=subprocess.PIPE, env=env
    )
    try:
        with StoreClient(node.socket_path) as driver:
            retried = os.urandom(20)
            node.set_total_resources({"CPU": 2, "x": 1})
            demand = {"CPU": 1.0, "x": 0.5}
            driver.submit_task(
                os.urandom(20), b"r", resources=demand, return_ids=[retried], max_retries=3
            )
            wait_for(lambda: len(node.worker_holdings()) == 1, 20, "the task running")
            [held] = node.worker_holdings()
            assert held == {"pid": proc.pid, "actor_id": None, "resources": demand}
            # retry=False: the task fails although retries are left.
            assert node.kill_worker(proc.pid, "WORKER_DIED", "its group was removed", False)
            [buf] = driver.get([retried], timeout_s=10)
            assert buf is not None and buf.metadata == b"WORKER_DIED"
            assert bytes(buf).startswith(b"its group was removed (task ")
            buf.release()
            wait_for(lambda: not node.worker_holdings(), message="nothing held")
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
