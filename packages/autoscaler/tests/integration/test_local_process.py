"""The local_process provider on real node processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from rayfield.autoscaler.cluster_state import UnsafeFileError
from rayfield.autoscaler.local_process import LocalProcessProvider
from rayfield.autoscaler.node_provider import (
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    ProviderError,
    get_node_provider,
)
from rayfield.testing import wait_for
from rayfield.util.state import StateClient

pytestmark = pytest.mark.timeout(300)


def test_provider_errors_without_processes(cluster_dir: Path) -> None:
    provider = get_node_provider({"type": "local_process", "cluster_dir": str(cluster_dir)}, "c")
    assert isinstance(provider, LocalProcessProvider)
    assert stat.S_IMODE(cluster_dir.stat().st_mode) == 0o700
    assert provider.non_terminated_nodes({}) == []
    assert provider.is_terminated("worker-x") and not provider.is_running("worker-x")
    with pytest.raises(ProviderError, match="has no node 'worker-x'"):
        provider.node_tags("worker-x")
    with pytest.raises(ProviderError, match="has no head"):
        provider.create_node({"resources": {"CPU": 1}}, {TAG_NODE_KIND: "worker"}, 1)
    provider.terminate_node("worker-x")  # gone already: not an error
    with pytest.raises(ProviderError, match="provider type 'azure' is not available"):
        get_node_provider({"type": "azure"}, "c")


def test_shared_cluster_dir_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(
        UnsafeFileError,
        match=f"refusing the cluster directory {shared} .*its group or others can write it",
    ):
        LocalProcessProvider({"type": "local_process", "cluster_dir": str(shared)}, "c")


def test_the_default_cluster_dir_is_private_at_both_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / f"rayfield-autoscaler-{os.getuid()}").mkdir(mode=0o755)  # an older version's
    provider = LocalProcessProvider({"type": "local_process"}, "c")
    assert provider.root == tmp_path / f"rayfield-autoscaler-{os.getuid()}" / "c"
    for d in (provider.root.parent, provider.root):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    provider.replace_records({"w": {"tags": {TAG_NODE_KIND: "worker"}, "temp_dir": "/x"}})
    for f in ("state.json", "state.lock"):
        assert stat.S_IMODE((provider.root / f).stat().st_mode) == 0o600, f


def test_records_and_token_are_read_only_when_private(cluster_dir: Path) -> None:
    """Every read checks again: a state.json swapped for a symlink, or a head's token
    file that others may write, is refused, never read."""
    provider = LocalProcessProvider({"type": "local_process", "cluster_dir": str(cluster_dir)}, "c")
    session = cluster_dir / "elsewhere" / "session_x"
    session.mkdir(parents=True)
    (session / "token").write_text("t0ken")
    head = {"tags": {TAG_NODE_KIND: "head"}, "head": True, "gcs_address": "127.0.0.1:1"}
    provider.replace_records({"head-1": {**head, "temp_dir": str(session.parent)}})
    assert provider.token("head-1") == "t0ken"
    (session / "token").chmod(0o666)
    with pytest.raises(UnsafeFileError, match=f"refusing the head's token {session}/token"):
        provider.token("head-1")

    state = cluster_dir / "state.json"
    planted = cluster_dir / "elsewhere" / "state.json"
    planted.write_text(json.dumps({"nodes": {}}))
    state.unlink()
    state.symlink_to(planted)
    with pytest.raises(UnsafeFileError, match=f"refusing state.json {state} .*it is a symlink"):
        provider.non_terminated_nodes({})


def test_head_and_worker_lifecycle(
    cluster_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine_tmp = tmp_path / "machine-tmp"  # this machine's <tmp>, for the session link
    machine_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(machine_tmp))
    provider = LocalProcessProvider({"type": "local_process", "cluster_dir": str(cluster_dir)}, "c")
    small = {"resources": {"CPU": 1}, "object_store_memory": 64 << 20}
    provider.create_node(small, {TAG_NODE_KIND: "head", "k": "v"}, 1)
    (head,) = provider.non_terminated_nodes({TAG_NODE_KIND: "head"})
    assert provider.is_running(head) and not provider.is_terminated(head)
    assert provider.gcs_address(head).startswith("127.0.0.1:")
    assert len(provider.token(head)) > 20
    assert provider.internal_ip(head) == provider.external_ip(head) == "127.0.0.1"
    assert provider.cluster_node_id(head)

    provider.create_node(small, {TAG_NODE_KIND: "worker"}, 1)
    (worker,) = provider.non_terminated_nodes({TAG_NODE_KIND: "worker"})
    assert provider.is_running(worker)
    assert provider.cluster_node_id(worker) not in (None, provider.cluster_node_id(head))
    provider.set_node_tags(worker, {TAG_NODE_STATUS: "up-to-date"})
    assert provider.node_tags(worker) == {TAG_NODE_KIND: "worker", TAG_NODE_STATUS: "up-to-date"}

    state = cluster_dir / "state.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    recorded = json.loads(state.read_text())["nodes"]
    assert set(recorded) == {head, worker}
    assert provider.token(head) not in state.read_text()  # no secret in the tags/state
    assert "started" in provider.log_path(worker).read_text()

    # Each node reports how long it has been idle; the GCS's node records have it.
    def idle_figures() -> dict[str, float]:
        with StateClient(provider.gcs_address(head), token=provider.token(head)) as client:
            rows = {r["node_id"]: r["idle_duration_s"] for r in client.node_records()}
        return rows if len(rows) == 2 and all(v > 0 for v in rows.values()) else {}

    idle = wait_for(idle_figures, 30, "both nodes reporting idle time", interval=0.2)
    assert set(idle) == {provider.cluster_node_id(head), provider.cluster_node_id(worker)}

    # A driver on this machine finds the cluster with address="auto", as `rayfield
    # status` does: <tmp>/rayfield-<uid>/session_latest points at the head's session.
    env = {**os.environ, "TMPDIR": str(machine_tmp)}
    driver = (
        "import rayfield as rf; rf.init(address='auto'); "
        "print(sum(1 for n in rf.nodes() if n['Alive'])); rf.shutdown()"
    )
    found = subprocess.run(
        [sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0 and found.stdout.split()[-1] == "2", found.stderr[-2000:]
    status = subprocess.run(
        [sys.executable, "-m", "rayfield.cli.main", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    link = machine_tmp / f"rayfield-{os.getuid()}" / "session_latest"
    assert link.resolve().parent == cluster_dir / "nodes" / head

    infos = cluster_dir.glob("nodes/*/session_*/node.json")
    pids = {json.loads(p.read_text())["pid"] for p in infos}  # session_latest: the head's again
    assert len(pids) == 2
    provider.terminate_nodes([worker, head])
    assert provider.non_terminated_nodes({}) == []
    assert provider.is_terminated(head) and not provider.is_running(head)
    for pid in pids:  # stopped (a zombie init has not reaped yet counts as stopped)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not list(cluster_dir.glob("nodes/*/session_*/node.json"))  # cleaned
    assert not link.is_symlink()  # the head's link went with it
