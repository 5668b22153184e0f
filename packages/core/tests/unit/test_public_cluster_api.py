"""The public cluster API without a cluster: addresses, tokens, sessions, the KV outside a
cluster, the node IP and the microbenchmark's rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rayfield._private.common import session_files
from rayfield.experimental import internal_kv as kv
from rayfield.util import cluster, get_node_ip_address, perf


def test_resolve_address_checks_its_input(tmp_path: Path) -> None:
    assert cluster.resolve_address("10.0.0.1:6379") == "10.0.0.1:6379"
    for bad in ("10.0.0.1", "http://h:1", "h:port", ""):
        with pytest.raises(ValueError, match="HOST:PORT"):
            cluster.resolve_address(bad)
    with pytest.raises(cluster.ClusterError, match="no running rayfield cluster"):
        cluster.resolve_address("auto", tmp_path / "empty")


def test_find_token_prefers_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cluster.ENV_TOKEN, "ab" * 32 + "\n")
    assert cluster.find_token("127.0.0.1:1", tmp_path) == "ab" * 32
    monkeypatch.delenv(cluster.ENV_TOKEN)
    with pytest.raises(cluster.ClusterError, match="RAYFIELD_TOKEN"):
        cluster.find_token("127.0.0.1:1", tmp_path)


def test_clean_stopped_sessions_removes_what_dead_nodes_left(tmp_path: Path) -> None:
    root = tmp_path / "root"
    live, dead = session_files.new_session_dir(root), session_files.new_session_dir(root)
    sockets = dead / "sockets"
    sockets.mkdir()
    (sockets / "node.sock").touch()
    cluster.write_private(live / "node.json", json.dumps({"pid": os.getpid()}))
    cluster.write_private(
        dead / "node.json", json.dumps({"pid": 2**22 + 1, "socket": str(sockets / "node.sock")})
    )
    session_files.point_latest(root, dead)
    assert cluster.clean_stopped_sessions(root) == 1
    assert not sockets.exists() and not (dead / "node.json").exists()
    assert (live / "node.json").exists()
    assert not (root / "session_latest").is_symlink()
    assert cluster.clean_stopped_sessions(tmp_path / "none") == 0


def test_killed_head_is_a_head_whose_gcs_is_gone_without_stopping(tmp_path: Path) -> None:
    root = tmp_path / "root"
    head = session_files.new_session_dir(root)
    session_files.point_latest(root, head)
    address = "127.0.0.1:6399"
    dead_pid = 2**22 + 1
    cluster.write_private(head / "cluster.json", json.dumps({"gcs_address": address}))
    cluster.write_private(head / "token", "ab" * 32 + "\n")
    cluster.write_private(head / "gcs.sqlite", "tables")
    for pid in (dead_pid, os.getpid()):
        record = {"gcs_address": address, "gcs_pid": pid}
        cluster.write_private(head / "cluster.json", json.dumps(record))
        expected = head if pid == dead_pid else None  # a running GCS is not restarted
        assert cluster.killed_head(root, address) == expected
    assert cluster.killed_head(root, "127.0.0.1:1") is None  # another address
    cluster.write_private(head / "gcs.sqlite.stopped", "stopped cleanly\n")
    assert cluster.killed_head(root, address) is None  # stopped, not killed
    assert cluster.killed_head(tmp_path / "none", address) is None


def test_session_json_is_read_only_when_private(tmp_path: Path) -> None:
    root = tmp_path / "root"
    session = session_files.new_session_dir(root)
    cluster.write_private(session / "x.json", json.dumps({"a": 1}))
    assert cluster.read_session_json(session / "x.json") == {"a": 1}
    (session / "x.json").chmod(0o666)
    with pytest.raises(cluster.UnsafeSessionError):
        cluster.read_session_json(session / "x.json")


def test_internal_kv_outside_a_cluster_says_so() -> None:
    assert kv._internal_kv_initialized() is False
    with pytest.raises(RuntimeError, match="needs a cluster"):
        kv._internal_kv_get("k")
    with pytest.raises(RuntimeError, match="needs a cluster"):
        kv._internal_kv_put("k", b"v")


def test_get_node_ip_address() -> None:
    """Without rayfield initialized: the route out (the node's own address once it is, as
    the integration tests check)."""
    assert get_node_ip_address("127.0.0.1:9") == "127.0.0.1"
    parts = get_node_ip_address().split(".")
    assert len(parts) == 4 and all(p.isdigit() for p in parts)
    with pytest.raises(ValueError, match="HOST:PORT"):
        get_node_ip_address("localhost")


def test_get_node_ip_address_asks_the_cluster_once_per_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tune calls it for every result: the node's address is looked up once per node."""
    import rayfield
    from rayfield.util import network

    asked: list[str] = []
    node = {"id": "n1"}

    class Context:
        def get_node_id(self) -> str:
            return node["id"]

    def nodes() -> list[dict[str, str]]:
        asked.append(node["id"])
        return [
            {"NodeID": "n1", "NodeManagerAddress": "10.0.0.1"},
            {"NodeID": "n2", "NodeManagerAddress": "10.0.0.2"},
        ]

    monkeypatch.setattr(network, "_KNOWN", {})
    from rayfield._private import context

    monkeypatch.setattr(context, "current", lambda: object())  # initialized
    monkeypatch.setattr(rayfield, "get_runtime_context", Context)
    monkeypatch.setattr(rayfield, "nodes", nodes)
    assert [get_node_ip_address() for _ in range(3)] == ["10.0.0.1"] * 3
    node["id"] = "n2"
    assert get_node_ip_address() == "10.0.0.2"
    assert asked == ["n1", "n2"]


def test_perf_rows_and_timed_rate() -> None:
    keys = [k for k, _ in perf.ROWS]
    assert set(perf.QUICK_ROWS) <= set(keys)
    assert perf.UNITS["put_gigabytes"] == "GB/s"
    result = perf.timed_rate(lambda: None, 10, budget_s=0.02, warmup_s=0.0)
    assert result["calls"] >= 1 and result["rate"] > 0


def test_session_dirs_are_private_and_per_user(tmp_path: Path) -> None:
    assert cluster.default_temp_dir().name == f"rayfield-{os.getuid()}"
    session = cluster.new_session_dir(tmp_path / "root")
    assert session.name.startswith("session_") and (session / "logs").is_dir()
    assert (session.stat().st_mode & 0o777) == 0o700
    assert cluster.head_session(tmp_path / "root") is None  # no cluster.json: not a head
    opts = cluster.NodeOptions()
    assert opts.node_ip_address == "127.0.0.1" and opts.temp_dir == cluster.default_temp_dir()


def test_the_cluster_module_loads_grpc_only_for_tls_and_tokens() -> None:
    code = (
        "import sys, rayfield.util.cluster as c\n"
        "assert 'grpc' not in sys.modules, 'imported grpc'\n"
        "assert c.TlsConfig('c', 'k', 'a').ca_path == 'a' and callable(c.read_token)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cluster.nope  # noqa: B018


def test_stop_wait_counts_a_zombie_as_exited() -> None:
    import psutil

    from rayfield._private.driver.launch import wait_exited

    done = subprocess.Popen([sys.executable, "-c", "pass"])  # never reaped: a zombie
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone, busy = psutil.Process(done.pid), psutil.Process(running.pid)
        exited: list[psutil.Process] = []
        # a zombie not counted as exited would still be listed after the 30 s
        assert wait_exited([gone], 30.0, on_exit=exited.append) == []
        assert exited == [gone]
        assert gone.status() == psutil.STATUS_ZOMBIE  # not reaped, yet counted as exited
        assert wait_exited([busy], 0.2) == [busy]
    finally:
        running.kill()
        running.wait()
        done.wait()


def test_rayfield_util_is_an_attribute_of_rayfield_imported_on_first_use() -> None:
    code = (
        "import sys, rayfield; assert 'rayfield.util' not in sys.modules; "
        "assert rayfield.util.private_files.write_json and rayfield.util.ActorPool"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
