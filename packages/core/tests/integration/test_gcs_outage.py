"""A two-node cluster whose GCS is killed and restarted: work between nodes goes on.

While the GCS is down, an actor call to an actor on the other node, and a task of a
function first exported during the outage, must answer as fast as with the GCS up (no
thread of the nodes may wait for the GCS on their path). What the nodes had to write to
the GCS meanwhile (object locations, the new code) must reach it once it is back.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import rayfield as rf
from rayfield._private.common.code import NAMESPACE
from rayfield._private.gcs.client import GcsClient
from rayfield.testing import wait_for
from rayfield.util import cluster

MAX_CALL_S = 2.0  # an actor call takes milliseconds; a call that waited for the GCS, ~30 s
OUTAGE_S = 2.0  # how long calls are timed while the GCS is down


@rf.remote(resources={"x": 1})
def square(i: int) -> int:
    return i * i


@rf.remote(resources={"x": 1}, num_cpus=0)
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self, k: int) -> int:
        self.n += k
        return self.n


def _gcs_process(temp_dir: Path) -> psutil.Process:
    procs = cluster.rayfield_processes(temp_dir)
    [proc] = [p for p in procs if "rayfield._private.gcs.server" in p.cmdline()]
    return proc


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A head (1 CPU) and a node with resource ``x``, under ``tmp_path``; this driver
    connected. Yields (GCS address, token)."""
    head = cluster.new_session_dir(tmp_path)
    try:
        address = cluster.start_gcs(head, "127.0.0.1", 0, cluster.NodeOptions(temp_dir=tmp_path))
        token = (head / "token").read_text().strip()
        opts = cluster.NodeOptions(num_cpus=1, temp_dir=tmp_path)
        cluster.start_node(head, address, token, opts, head=True)
        opts.resources = {"x": 100}
        cluster.start_node(cluster.new_session_dir(tmp_path), address, token, opts)
        rf.init(address=address, temp_dir=str(tmp_path))
        yield address, token
    finally:
        rf.shutdown()
        cluster.stop_all(5.0, temp_dir=tmp_path)


def _timed(ref: rf.ObjectRef[int]) -> tuple[int, float]:
    start = time.monotonic()
    value = rf.get(ref, timeout=MAX_CALL_S)  # GetTimeoutError: the call waited too long
    return value, time.monotonic() - start


def test_work_between_nodes_goes_on_while_the_gcs_is_down(
    two_nodes: tuple[str, str], tmp_path: Path
) -> None:
    address, token = two_nodes
    counter = Counter.remote()
    assert rf.get(counter.add.remote(1)) == 1  # created on the node with x
    assert rf.get([square.remote(i) for i in range(10)]) == [i * i for i in range(10)]
    _, up_s = _timed(counter.add.remote(0))

    gcs = _gcs_process(tmp_path)
    restart = gcs.cmdline()
    restart[restart.index("--port") + 1] = address.rsplit(":", 1)[1]  # started with 0
    gcs.send_signal(signal.SIGKILL)
    gcs.wait(5)

    @rf.remote(resources={"x": 1})
    def cube(i: int) -> int:  # exported while the GCS is down: the node pulls it from here
        return i**3

    n, slowest, squares = 1, 0.0, []
    down_since = time.monotonic()
    while time.monotonic() - down_since < OUTAGE_S:
        squares.append(square.remote(len(squares)))  # results here: locations to record
        value, took = _timed(counter.add.remote(1))
        n += 1
        assert value == n
        slowest = max(slowest, took)
    start = time.monotonic()
    assert rf.get(cube.remote(3), timeout=MAX_CALL_S) == 27
    new_code_s = time.monotonic() - start
    assert rf.get(squares, timeout=30) == [i * i for i in range(len(squares))]
    print(
        f"actor call with the GCS up {up_s * 1e3:.1f} ms; {n - 1} calls while down, "
        f"slowest {slowest * 1e3:.1f} ms; a task of new code {new_code_s * 1e3:.0f} ms"
    )

    with open(tmp_path / "gcs-restarted.out", "ab") as out:
        subprocess.Popen(restart, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    with GcsClient(address, token, tls=False) as gcs_client:
        # What the nodes could not write while the GCS was down gets there now.
        last = squares[-1].binary()
        wait_for(
            lambda: gcs_client.get_object_locations([last])[last],
            30,
            "the location of a result pulled during the outage recorded",
            interval=0.1,
        )
        code_id = cube._exported[1]  # type: ignore[index]
        wait_for(
            lambda: gcs_client.kv_get(NAMESPACE, code_id) is not None,
            30,
            "the code exported during the outage stored in the GCS",
            interval=0.1,
        )
    assert rf.get(counter.add.remote(1)) == n + 1


GIVE_UP_S = 2.0  # the nodes' gcs_reconnect_timeout_s in the test below
HEARTBEAT_S = 0.5  # the nodes' heartbeat interval


@rf.remote(num_cpus=0)
class Keeper:
    def pid(self) -> int:
        import os

        return os.getpid()


@rf.remote
def double(i: int) -> int:
    return 2 * i


def test_a_node_whose_gcs_never_comes_back_shuts_down_with_its_workers(tmp_path: Path) -> None:
    head = cluster.new_session_dir(tmp_path)
    try:
        address = cluster.start_gcs(head, "127.0.0.1", 0, cluster.NodeOptions(temp_dir=tmp_path))
        token = (head / "token").read_text().strip()
        opts = cluster.NodeOptions(num_cpus=1, temp_dir=tmp_path, gcs_reconnect_timeout_s=GIVE_UP_S)
        node = psutil.Process(cluster.start_node(head, address, token, opts, head=True)["pid"])
        rf.init(address=address, temp_dir=str(tmp_path))
        keeper = Keeper.options(name="keeper", lifetime="detached").remote()
        actor_pid = rf.get(keeper.pid.remote())
        assert rf.get(double.remote(3)) == 6  # and a worker for tasks
        workers = node.children(recursive=True)
        assert actor_pid in [w.pid for w in workers]
        rf.shutdown()  # the detached actor's worker stays

        gcs = _gcs_process(tmp_path)
        gcs.send_signal(signal.SIGKILL)
        gcs.wait(5)
        status = node.wait(timeout=GIVE_UP_S + 30)  # never restarted: the node gives up
        assert status == 1, (head / "logs" / "node.out").read_text()[-3000:]
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert alive == [], f"orphan workers: {alive}"
        log = (head / "logs" / "node.out").read_text()
        # The node gave up by its own count (GcsReach, unit-tested with a clock): first
        # the warning with the configured limit, then the give-up past that limit.
        lost = log.index(f"and stops after {GIVE_UP_S:g} s without it")
        gave_up = re.search(
            rf"has not answered for ([0-9.]+) s \(gcs_reconnect_timeout_s={GIVE_UP_S:g}\)"
            r": shutting this node down",
            log,
        )
        assert gave_up is not None and gave_up.start() > lost, log[-3000:]
        assert float(gave_up.group(1)) >= GIVE_UP_S
        assert not (head / "node.json").exists()
    finally:
        rf.shutdown()
        cluster.stop_all(5.0, temp_dir=tmp_path)
