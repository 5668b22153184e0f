"""Direct actor calls between two real nodes: a driver's calls go straight to the actor's
worker once it has made a few through the node (``_private/driver/direct_calls.py``), in
order with the calls that still take the node's path, and none is lost when the worker
dies."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import rayfield as rf
from rayfield.testing import wait_for

CALLS = 200


@pytest.fixture(scope="module")
def cluster(driver_cluster: tuple[str, Path]) -> str:
    """Two nodes (the second with 4 of "b"), this process their driver."""
    return driver_cluster[0]


@rf.remote(num_cpus=0, resources={"b": 1})
class Log:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def add(self, x: Any) -> int:
        self.seen.append(x)
        return len(self.seen)

    def all(self) -> list[Any]:
        return self.seen

    def pid(self) -> int:
        return os.getpid()

    def fail(self) -> None:
        raise KeyError("from the actor")

    def pair(self) -> tuple[int, str]:
        return 1, "two"

    def big(self) -> bytes:
        return b"x" * (300 << 10)

    def hang_once(self, marker: str) -> str:
        """The first time: mark that it runs, then never return (until killed)."""
        if not os.path.exists(marker):
            Path(marker).write_text("running")
            time.sleep(3600)
        return "again"


def _direct(handle: Any) -> bool:
    return bool(handle._direct is not None and handle._direct.plan.direct)


def _go_direct(handle: Any) -> None:
    """Make calls until the handle's calls go direct."""
    wait_for(
        lambda: rf.get(handle.pid.remote()) > 0 and _direct(handle),
        timeout=30,
        message="the handle's calls to go direct",
    )


def test_calls_go_direct_and_return_what_the_node_path_does(cluster: str) -> None:
    log = Log.remote()
    _go_direct(log)
    n = rf.get(log.add.remote(0))
    assert rf.get([log.add.remote(i) for i in range(CALLS)])[-1] == n + CALLS
    assert _direct(log)
    assert rf.get(log.pair.options(num_returns=2).remote()) == [1, "two"]
    assert len(rf.get(log.big.remote())) == 300 << 10
    with pytest.raises(KeyError, match="from the actor"):
        rf.get(log.fail.remote())
    # A result is an object of this node like any other: a task on the other node reads it.
    total = rf.remote(resources={"b": 1})(lambda xs: len(xs))
    assert rf.get(total.remote(log.all.remote())) == n + CALLS


def test_calls_stay_in_order_across_both_paths(cluster: str) -> None:
    log = Log.remote()
    _go_direct(log)
    start = len(rf.get(log.all.remote()))
    # Inline arguments go direct; an ObjectRef argument takes the node's path.
    refs = [log.add.remote(rf.put(i) if i % 7 == 3 else i) for i in range(CALLS)]
    rf.get(refs)
    assert rf.get(log.all.remote())[start:] == list(range(CALLS))


def test_calls_made_for_their_effect_run_before_a_later_call(cluster: str) -> None:
    log = Log.remote()
    _go_direct(log)
    start = len(rf.get(log.all.remote()))
    for i in range(CALLS):
        log.add.remote(i)  # the ref is dropped at once
    assert rf.get(log.all.remote())[start:] == list(range(CALLS))


def test_a_dropped_handle_keeps_its_actor_until_its_direct_calls_are_answered(
    cluster: str,
) -> None:
    log = Log.remote()
    _go_direct(log)
    refs = [log.add.remote(i) for i in range(CALLS)]
    del log
    assert len(rf.get(refs, timeout=60)) == CALLS


def _kill_while_running(log: Any, marker: Path) -> list[Any]:
    """Calls in flight on the direct path, the first one running, when the worker is
    SIGKILLed; their refs."""
    _go_direct(log)
    pid = rf.get(log.pid.remote())
    refs = [log.hang_once.remote(str(marker))]
    refs += [log.add.remote(i) for i in range(CALLS)]
    wait_for(marker.exists, timeout=30, message="the call to start running")
    assert _direct(log)
    os.kill(pid, signal.SIGKILL)
    return refs


def test_a_killed_worker_loses_no_call_of_a_restartable_actor(cluster: str, tmp_path: Path) -> None:
    log = Log.options(max_restarts=-1, max_task_retries=-1).remote()
    refs = _kill_while_running(log, tmp_path / "marker")
    refs += [log.add.remote(i) for i in range(CALLS)]
    got = rf.get(refs, timeout=90)
    assert got[0] == "again"  # the running call ran again on the restarted actor
    assert got[1 : CALLS + 1] == list(range(1, CALLS + 1))  # the others once each, in order
    assert got[-1] == 2 * CALLS


def test_a_killed_worker_fails_the_running_call_without_retries(
    cluster: str, tmp_path: Path
) -> None:
    log = Log.remote()
    refs = _kill_while_running(log, tmp_path / "marker")
    for ref in refs:  # the actor is not restarted: none of them runs
        with pytest.raises(rf.exceptions.RayActorError):
            rf.get(ref, timeout=60)
    with pytest.raises(rf.exceptions.RayActorError):
        rf.get(log.add.remote(0), timeout=60)


def test_a_wrong_secret_or_a_malformed_call_closes_only_that_connection(cluster: str) -> None:
    from rayfield._private.driver import direct_calls
    from rayfield._private.runtime import direct_wire as wire

    log = Log.remote()
    _go_direct(log)
    found = direct_calls.find_worker(log._actor_id)
    assert found is not None
    host, port, secret = found
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(wire.HELLO.pack(wire.MAGIC, wire.VERSION, bytes(wire.SECRET_BYTES)))
        assert sock.recv(2) == b""  # closed: wrong secret
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(wire.HELLO.pack(wire.MAGIC, wire.VERSION, secret))
        assert sock.recv(2) == b"OK"
        sock.sendall(wire.LENGTH.pack(5) + b"junk!")
        assert sock.recv(16) == b""  # closed: not a call
    assert rf.get([log.add.remote(i) for i in range(10)])[-1] > 0
    assert _direct(log)
