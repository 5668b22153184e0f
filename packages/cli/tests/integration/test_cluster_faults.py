"""A GCS restarted mid-workload, and a cluster that runs with mutual TLS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
from clusterutil import (
    add_node,
    cli_process,
    rayfield_cmd,
    start_nodes,
    stop_in_background,
)

import rayfield as rf
from rayfield._private.gcs.client import GcsClient
from rayfield._private.protocol.errors import GcsUnavailableError
from rayfield.exceptions import ObjectLostError
from rayfield.testing import wait_for
from rayfield.util.cluster import find_token, make_test_certificates, rayfield_processes


@rf.remote(resources={"x": 1})
def square(i: int) -> int:
    time.sleep(0.001)
    return i * i


@rf.remote(resources={"x": 1}, num_cpus=0)
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self, k: int) -> int:
        self.n += k
        return self.n


def gcs_process(temp_dir: Path) -> psutil.Process:
    [proc] = [
        p for p in rayfield_processes(temp_dir) if "rayfield._private.gcs.server" in p.cmdline()
    ]
    return proc


def test_gcs_restart_mid_workload_loses_nothing(tmp_path: Path) -> None:
    address = start_nodes(tmp_path)
    rf.init(address=address, temp_dir=str(tmp_path))
    try:
        counter = Counter.remote()
        assert rf.get(counter.add.remote(1)) == 1  # placed on the other node, in the GCS
        token = find_token(address, tmp_path)
        with GcsClient(address, token) as gcs:
            assert gcs.kv_put("test", "acknowledged", b"before the crash")
        first = [square.remote(i) for i in range(300)]
        gcs_proc = gcs_process(tmp_path)
        cmd, log = gcs_proc.cmdline(), tmp_path / "gcs-restarted.out"
        cmd[cmd.index("--port") + 1] = address.rsplit(":", 1)[1]  # it was started with 0
        gcs_proc.send_signal(signal.SIGKILL)
        gcs_proc.wait(5)
        during = [square.remote(i) for i in range(300, 600)]  # work goes on without a GCS
        assert rf.get(counter.add.remote(1)) == 2
        time.sleep(1.0)
        with open(log, "ab") as out:
            subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        after = [square.remote(i) for i in range(600, 900)]
        assert rf.get(first + during + after, timeout=120) == [i * i for i in range(900)]
        with GcsClient(address, token) as gcs:
            assert gcs.kv_get("test", "acknowledged") == b"before the crash"
            wait_for(
                lambda: len([n for n in gcs.get_nodes() if n.alive]) == 2,
                15,
                "both nodes alive in the restarted GCS",
                interval=0.2,
            )
            actors = gcs.list_actors()
        assert len(actors) == 1 and actors[0].node_id  # the actor's record came back
        assert rf.get(counter.add.remote(1)) == 3  # and it kept its state
        out = rayfield_cmd("status", "--temp-dir", str(tmp_path)).stdout
        assert "2 node(s) alive, 0 dead" in out
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)


def test_tls_cluster_works_and_refuses_plaintext_peers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = make_test_certificates(tmp_path)
    tls = {
        "RAYFIELD_TLS_CERT": str(certs["server.crt"]),
        "RAYFIELD_TLS_KEY": str(certs["server.key"]),
        "RAYFIELD_TLS_CA": str(certs["ca.crt"]),
    }
    for k, v in tls.items():  # the CLI, the nodes and this driver read the same variables
        monkeypatch.setenv(k, v)
    address = start_nodes(tmp_path / "rf")
    rf.init(address=address, temp_dir=str(tmp_path / "rf"))
    try:
        assert rf.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)]
        # 16 MB made on the second node: the head pulls it on the data channel, over TLS.
        assert np.array_equal(rf.get(make_on_this_node.remote(2_000_000)), np.arange(2_000_000))
        token = find_token(address, tmp_path / "rf")
        with GcsClient(address, token) as gcs:
            nodes = gcs.get_nodes()
        plain = GcsClient(address, token, tls=False, retry_deadline_s=1.0)
        with plain, pytest.raises(GcsUnavailableError):
            plain.get_nodes()
        for node in nodes:  # node services refuse a plaintext peer too
            channel = grpc.insecure_channel(node.address)
            call = channel.unary_unary("/rayfield.Node/HasObjects")
            with pytest.raises(grpc.RpcError) as err:
                call(b"", metadata=(("authorization", f"Bearer {token}"),), timeout=3)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            channel.close()
        out = rayfield_cmd("status", "--temp-dir", str(tmp_path / "rf")).stdout
        assert "2 node(s) alive" in out
        logs = "".join(p.read_text() for p in (tmp_path / "rf").glob("session_*/logs/node.out"))
        assert "over gRPC" not in logs and "data channel" not in logs  # no fallback, no refusal
    finally:
        rf.shutdown()
        stop_in_background(tmp_path / "rf")


@rf.remote(resources={"x": 1})
def put_on_this_node(n: int) -> list[rf.ObjectRef]:
    return [rf.put(np.arange(n))]


@rf.remote(resources={"x": 1}, max_retries=3)
def make_on_this_node(n: int) -> np.ndarray:
    return np.arange(n)


def test_object_of_a_dead_node_raises_object_lost_not_a_hang(tmp_path: Path) -> None:
    address = start_nodes(tmp_path, "--heartbeat-timeout-s", "1.5")
    rf.init(address=address, temp_dir=str(tmp_path))
    try:
        [put_ref] = rf.get(put_on_this_node.remote(100_000))  # the object stays on node 2
        kept = make_on_this_node.remote(50_000)  # a task's return, pulled here below
        assert rf.get(kept)[-1] == 49_999
        head = json.loads((tmp_path / "session_latest" / "node.json").read_text())["pid"]
        [victim] = [
            p
            for p in rayfield_processes(tmp_path)
            if "rayfield._private.node_manager.node_main" in p.cmdline() and p.pid != head
        ]
        for p in [victim, *victim.children(recursive=True)]:
            p.send_signal(signal.SIGKILL)
        # the typed error once the node is declared dead, not GetTimeoutError (a hang)
        with pytest.raises(ObjectLostError) as err:
            rf.get(put_ref, timeout=60)
        assert put_ref.hex() in str(err.value) and "died" in str(err.value)
        assert rf.get(kept)[-1] == 49_999  # a copy lives on the driver's node
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)


@rf.remote(num_cpus=0)
def record_run(i: int, runs: str) -> int:
    with open(os.path.join(runs, str(i)), "a") as f:
        f.write("ran\n")
    return i


def test_a_forward_answered_late_is_retried_without_running_a_task_twice(tmp_path: Path) -> None:
    late_s = 11.0  # longer than a ForwardTasks call's timeout (10 s): the sender retries
    address = start_nodes(tmp_path, count=1)
    add_node(
        address,
        tmp_path,
        '{"late": 100}',
        env=dict(os.environ, RAYFIELD_TEST_LATE_FORWARD_S=str(late_s)),
    )
    runs = tmp_path / "runs"
    runs.mkdir()
    rf.init(address=address, temp_dir=str(tmp_path))
    try:
        start = time.monotonic()
        refs = [record_run.options(resources={"late": 1}).remote(i, str(runs)) for i in range(20)]
        assert sorted(rf.get(refs, timeout=120)) == list(range(20))

        def counts() -> list[int]:
            return [len((runs / str(i)).read_text().splitlines()) for i in range(20)]

        wait_for(lambda: all(n >= 1 for n in counts()), 20, "every task ran", interval=0.2)
        # A sender that took the late answer for a refusal runs the batch again about a
        # second after its timeout: watch until well past that.
        while time.monotonic() < start + late_s + 6:
            assert counts() == [1] * 20, counts()
            time.sleep(0.2)
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)


def test_start_block_ends_with_its_node_when_the_gcs_never_comes_back(tmp_path: Path) -> None:
    args = ["start", "--head", "--port", "0", "--num-cpus", "1", "--block"]
    args += ["--gcs-reconnect-timeout-s", "1", "--temp-dir", str(tmp_path)]
    with cli_process(args, tmp_path) as proc:
        node_json = tmp_path / "session_latest" / "node.json"
        wait_for(node_json.exists, 60, "the head's node started", interval=0.2)
        [gcs] = [p for p in rayfield_processes(tmp_path) if "--port-file" in p.cmdline()]
        gcs.kill()  # never restarted: the node gives up after 1 s, and `start --block` ends
        _, err = proc.communicate(timeout=30)
        left = rayfield_processes(tmp_path)
    assert proc.returncode == 1, err
    assert "exited with status 1" in err, err
    assert left == [], [p.cmdline() for p in left]


@rf.remote(max_retries=-1)
def slow_square(i: int) -> int:
    time.sleep(0.02)
    return i * i


@rf.remote(num_cpus=0, resources={"h": 1}, max_restarts=-1, max_task_retries=-1)
class OnHead:
    def add(self, k: int) -> int:
        return os.getpid()


def test_a_killed_head_restarted_with_the_same_command_loses_nothing(tmp_path: Path) -> None:
    """SIGKILL the GCS and the head node together while a driver on the other node runs
    tasks and calls a named, detached actor that lives on the head; run the head's start
    command again: the cluster comes back with its tables and token, the work completes
    and the actor is back (restarted on the new head node)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    head_cmd = ["start", "--head", "--port", str(port), "--num-cpus", "1"]
    head_cmd += ["--resources", '{"h": 10}', "--temp-dir", str(tmp_path)]
    head_cmd += ["--heartbeat-timeout-s", "1.5"]
    rayfield_cmd(*head_cmd)
    address = f"127.0.0.1:{port}"
    head = (tmp_path / "session_latest").resolve()
    add_node(address, tmp_path, '{"b": 10}')
    [other] = [s for s in tmp_path.glob("session_2*") if s != head]
    rf.init(address=str(other), temp_dir=str(tmp_path))  # a driver on the other node
    try:
        counter = OnHead.options(name="counter", lifetime="detached").remote()
        first_pid = rf.get(counter.add.remote(1), timeout=30)
        refs = [slow_square.remote(i) for i in range(400)]
        wait_for(
            lambda: rf.wait(refs, num_returns=20, timeout=0)[0], 20, "some tasks done", interval=0.2
        )
        for p in rayfield_processes(tmp_path):
            cmd = " ".join(p.cmdline())
            if "rayfield._private.gcs.server" in cmd or str(head) in cmd:
                p.send_signal(signal.SIGKILL)
        calls = [counter.add.remote(1) for _ in range(10)]
        out = rayfield_cmd(*head_cmd).stdout
        assert "was killed" in out and str(head) in out
        calls += [counter.add.remote(1) for _ in range(10)]
        assert rf.get(refs, timeout=120) == [i * i for i in range(400)]
        pids = rf.get(calls, timeout=120)
        assert len(pids) == 20 and pids[-1] != first_pid  # served by the new instance
        again = rf.get_actor("counter")
        assert rf.get(again.add.remote(0), timeout=60) == pids[-1]
        status = rayfield_cmd("status", "--temp-dir", str(tmp_path)).stdout
        assert "2 node(s) alive, 1 dead" in status
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)


def test_a_head_stopped_cleanly_starts_afresh_on_the_same_address(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    head_cmd = ["start", "--head", "--port", str(port), "--num-cpus", "1"]
    head_cmd += ["--temp-dir", str(tmp_path)]
    rayfield_cmd(*head_cmd)
    token = find_token(f"127.0.0.1:{port}", tmp_path)
    rayfield_cmd("stop", "--temp-dir", str(tmp_path))
    out = rayfield_cmd(*head_cmd).stdout
    try:
        assert "was killed" not in out
        assert find_token(f"127.0.0.1:{port}", tmp_path) != token  # a new cluster
    finally:
        stop_in_background(tmp_path)
