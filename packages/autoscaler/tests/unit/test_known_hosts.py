"""Host-key checking without sshd: the ssh options a runner passes (accept-new with the
cluster's known-hosts file by default, the old way only when asked), the file's
creation and checks, quoting, forgetting a terminated cloud node's keys, and the config
key ``auth.host_key_checking``. tests/integration/test_ssh_updater.py checks them against sshd."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from conftest import ssh_config
from memory_provider import MemoryProvider

from rayfield.autoscaler import known_hosts
from rayfield.autoscaler.command_runner import SSHCommandRunner
from rayfield.autoscaler.config import ConfigError, launch_hash, prepare_config
from rayfield.autoscaler.launcher_state import SSHClusterProvider
from rayfield.autoscaler.local import LocalNodeProvider
from rayfield.autoscaler.node_provider import KIND_WORKER, TAG_NODE_KIND
from rayfield.autoscaler.node_setup import NodeSetup
from rayfield.util.private_files import UnsafeFileError


def options(runner: SSHCommandRunner) -> dict[str, str]:
    opts = runner.ssh_options()
    return dict(opts[i + 1].split("=", 1) for i, o in enumerate(opts) if o == "-o")


def test_host_keys_are_pinned_in_the_given_file_by_default(tmp_path: Path) -> None:
    known = tmp_path / "cluster dir" / "known_hosts"
    known.parent.mkdir(mode=0o700)
    opts = options(SSHCommandRunner("10.0.0.1", "u", "key", known_hosts=known))
    assert opts["StrictHostKeyChecking"] == "accept-new"
    assert opts["UserKnownHostsFile"] == f'"{known}"'  # quoted: the path has a space
    assert opts["HashKnownHosts"] == "no"
    assert known.read_text() == "" and stat.S_IMODE(known.stat().st_mode) == 0o600
    # Without a file: ssh's own (~/.ssh/known_hosts), still accept-new.
    opts = options(SSHCommandRunner("10.0.0.1", "u", "key"))
    assert opts["StrictHostKeyChecking"] == "accept-new" and "UserKnownHostsFile" not in opts


def test_the_old_way_only_when_asked(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    runner = SSHCommandRunner("10.0.0.1", "u", "key", known_hosts=known, host_key_checking=False)
    opts = options(runner)
    assert opts["StrictHostKeyChecking"] == "no" and opts["UserKnownHostsFile"] == "/dev/null"
    assert not known.exists()


def test_a_known_hosts_file_not_yours_alone_is_refused_or_tightened(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    known.chmod(0o666)  # this user's: set back to 0600
    SSHCommandRunner("10.0.0.1", "u", "key", known_hosts=known).ssh_options()
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    os.chown(known, os.getuid() + 4242, -1)  # another user's (the tests run as root)
    refused = f"refusing the cluster's known_hosts {re.escape(str(known))}.*it is not yours"
    with pytest.raises(UnsafeFileError, match=refused):
        SSHCommandRunner("10.0.0.1", "u", "key", known_hosts=known).ssh_options()
    known.unlink()
    known.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeFileError, match="it is a symlink"):
        SSHCommandRunner("10.0.0.1", "u", "key", known_hosts=known).ssh_options()


def test_option_value_escapes_ssh_tokens() -> None:
    assert known_hosts.option_value(Path("/a/100%/k")) == '"/a/100%%/k"'
    with pytest.raises(ValueError, match="double quote"):
        known_hosts.option_value(Path('/a/"b'))


def test_forget_removes_only_the_given_hosts(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    assert known_hosts.forget(known, ["10.0.0.1"]) == 0  # no file: nothing to forget
    lines = [
        "# a comment naming 10.0.0.1\n",
        "10.0.0.1 ssh-ed25519 AAAA1\n",
        "10.0.0.10 ssh-ed25519 AAAA2\n",
        "host-a,10.0.0.2 ssh-ed25519 AAAA3\n",
        "[10.0.0.1]:2222 ssh-ed25519 AAAA4\n",
    ]
    known.write_text("".join(lines))
    known.chmod(0o600)
    assert known_hosts.forget(known, ["10.0.0.1", "10.0.0.2"]) == 2
    assert known.read_text() == "".join([lines[0], lines[2], lines[4]])
    assert known_hosts.forget(known, ["10.0.0.1"], port=2222) == 1
    assert stat.S_IMODE(known.stat().st_mode) == 0o600


def test_node_setup_gives_its_runners_the_cluster_file_and_the_config_choice(
    tmp_path: Path,
) -> None:
    for checking in (True, False):
        cfg = ssh_config(tmp_path)
        cfg["provider"]["cluster_dir"] = str(tmp_path / f"c-{checking}")
        cfg["auth"]["host_key_checking"] = checking
        provider = LocalNodeProvider(cfg["provider"], cfg["cluster_name"])
        provider.create_node({}, {TAG_NODE_KIND: "head"}, 1)
        runner = NodeSetup(cfg, provider).runner(provider.head_id())
        assert isinstance(runner, SSHCommandRunner)
        assert runner.known_hosts == tmp_path / f"c-{checking}" / "known_hosts"
        assert runner.host_key_checking is checking


def test_a_terminated_cloud_node_is_forgotten(tmp_path: Path) -> None:
    class TwoAddresses(MemoryProvider):
        def internal_ip(self, node_id: str) -> str | None:
            return f"10.0.0.{node_id[1:]}"

        def external_ip(self, node_id: str) -> str | None:
            return f"192.0.2.{node_id[1:]}"

    inner = TwoAddresses()
    inner.provider_config["cluster_dir"] = str(tmp_path / "state")
    provider = SSHClusterProvider(inner)
    provider.create_node({"resources": {}}, {TAG_NODE_KIND: KIND_WORKER}, 2)
    known = provider.known_hosts
    known.write_text("10.0.0.0 k1\n192.0.2.0 k2\n10.0.0.1 k3\n")
    provider.terminate_node("n0")
    assert known.read_text() == "10.0.0.1 k3\n"
    assert provider.non_terminated_nodes({}) == ["n1"]


def test_host_key_checking_is_a_boolean_outside_the_launch_hash() -> None:
    raw = {
        "cluster_name": "c1",
        "max_workers": 1,
        "provider": {"type": "local", "head_ip": "10.0.0.1", "worker_ips": ["10.0.0.2"]},
        "auth": {"ssh_user": "u", "ssh_private_key": "/k"},
    }
    with pytest.raises(ConfigError, match=r"'auth\.host_key_checking' has the wrong type"):
        prepare_config({**raw, "auth": {**raw["auth"], "host_key_checking": "no"}})
    off = prepare_config({**raw, "auth": {**raw["auth"], "host_key_checking": False}})
    assert off["auth"]["host_key_checking"] is False
    # Turning it off changes how the launcher connects, not the nodes: none is replaced.
    assert launch_hash(off, "worker") == launch_hash(prepare_config(raw), "worker")
