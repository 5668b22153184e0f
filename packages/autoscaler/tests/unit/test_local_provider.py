"""The ``local`` (SSH, fixed machines) provider: the conformance suite, and its address
bookkeeping. Creating a node only reserves an address; setting it up over SSH is tested
in test_ssh_cluster.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from rayfield.autoscaler.local import LocalNodeProvider
from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    KIND_WORKER,
    TAG_NODE_KIND,
    NodeProvider,
    ProviderError,
    get_node_provider,
)
from rayfield.autoscaler.provider_conformance import NodeProviderConformance

IPS = {"head_ip": "10.9.0.1", "worker_ips": ["10.9.0.2", "10.9.0.3"]}


class TestLocalNodeProvider(NodeProviderConformance):
    def make_provider(self) -> NodeProvider:
        self._dir = tempfile.TemporaryDirectory(prefix="rf-local-conformance-")
        cluster_dir = str(Path(self._dir.name) / "cluster")
        return get_node_provider({"type": "local", "cluster_dir": cluster_dir, **IPS}, "c")

    def teardown_method(self) -> None:
        try:
            super().teardown_method()
        finally:
            self._dir.cleanup()


def test_addresses_are_taken_from_the_lists_and_freed(tmp_path: Path) -> None:
    p = LocalNodeProvider({"type": "local", "cluster_dir": str(tmp_path / "c"), **IPS}, "c")
    p.create_node({}, {TAG_NODE_KIND: KIND_HEAD}, 1)
    with pytest.raises(ProviderError, match="one head"):
        p.create_node({}, {TAG_NODE_KIND: KIND_HEAD}, 1)
    p.create_node({}, {TAG_NODE_KIND: KIND_WORKER}, 2)
    ips = sorted(
        p.internal_ip(n) or "" for n in p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})
    )
    assert ips == IPS["worker_ips"]
    with pytest.raises(ProviderError, match=r"0 of provider\.worker_ips"):
        p.create_node({}, {TAG_NODE_KIND: KIND_WORKER}, 1)
    first = p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})[0]
    freed = p.internal_ip(first)
    p.terminate_node(first)
    p.create_node({}, {TAG_NODE_KIND: KIND_WORKER}, 1)
    assert freed in {p.internal_ip(n) for n in p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})}
    # Another provider object (another process) sees the same nodes.
    again = LocalNodeProvider({"type": "local", "cluster_dir": str(tmp_path / "c"), **IPS}, "c")
    assert again.non_terminated_nodes({}) == p.non_terminated_nodes({})
    head = p.head_id()
    with pytest.raises(ProviderError, match="not a started head"):
        p.token(head)
    p.record_started(head, {"gcs_address": "10.9.0.1:6379", "token": "t", "cluster_node_id": "ab"})
    assert (p.gcs_address(head), p.token(head), p.cluster_node_id(head)) == (
        "10.9.0.1:6379",
        "t",
        "ab",
    )
    assert oct((tmp_path / "c" / "state.json").stat().st_mode & 0o777) == "0o600"


def test_a_local_provider_needs_the_head_address(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="head_ip"):
        LocalNodeProvider({"type": "local", "cluster_dir": str(tmp_path)}, "c")


def test_records_can_be_read_and_replaced_whole(tmp_path: Path) -> None:
    p = LocalNodeProvider({"type": "local", "cluster_dir": str(tmp_path / "c"), **IPS}, "c")
    p.create_node({}, {TAG_NODE_KIND: KIND_HEAD}, 1)
    records = p.records()
    (head,) = records
    records["worker-x"] = {"tags": {TAG_NODE_KIND: KIND_WORKER}, "ip": "10.9.0.3", "head": False}
    records[head]["tags"]["k"] = "v"
    assert p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER}) == []  # a copy
    p.replace_records(records)
    assert p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER}) == ["worker-x"]
    assert p.node_tags(head)["k"] == "v"


def test_the_head_bootstrap_config_points_at_the_head_copies(tmp_path: Path) -> None:
    from conftest import ssh_config

    from rayfield.autoscaler.head_monitor import head_bootstrap, head_dir

    mount = tmp_path / "app"
    cfg = ssh_config(tmp_path, file_mounts={"/srv/app": str(mount)})
    boot = head_bootstrap(cfg)
    assert head_dir(cfg) == "rayfield-cluster-s"
    assert boot["provider"]["cluster_dir"] == "~/rayfield-cluster-s"
    assert boot["auth"]["ssh_private_key"] == "~/rayfield-cluster-s/ssh_key"
    assert boot["file_mounts"] == {"/srv/app": "/srv/app"}  # the head has the mount
    assert cfg["file_mounts"] == {"/srv/app": str(mount)}  # the launcher's is unchanged
