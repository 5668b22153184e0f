"""The SSH command runner and the node updater against real sshd instances, each in a
network namespace of its own (tests/integration/netns.py): commands, rsync and scp copies, a full
update in parallel on two hosts, a failing command and an unreachable host, and host
keys: pinned at first contact in the given known-hosts file, a changed one refused
(and the updater failing at once saying so), any accepted with host-key checking off."""

from __future__ import annotations

import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MakeUpdaters, ssh_config
from netns import SSHHosts, namespaces_left, ssh_hosts

from rayfield.autoscaler import command_runner
from rayfield.autoscaler.command_runner import SSHCommandRunner
from rayfield.autoscaler.node_provider import (
    STATUS_SETTING_UP,
    STATUS_SYNCING_FILES,
    STATUS_UP_TO_DATE,
    STATUS_UPDATE_FAILED,
    STATUS_WAITING_FOR_SSH,
    TAG_NODE_STATUS,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHosts]:
    with ssh_hosts(tmp_path_factory.mktemp("sshhosts"), 2) as found:
        yield found
    assert namespaces_left(found) == []


def runner(hosts: SSHHosts, i: int) -> SSHCommandRunner:
    """A runner for host ``i``, with the module's known-hosts file (its name has a
    space: the ssh, rsync and scp command lines must quote it)."""
    known = hosts.ssh_private_key.parent / "known hosts"
    return SSHCommandRunner(hosts.ips[i], hosts.ssh_user, hosts.ssh_private_key, known_hosts=known)


def test_commands_run_in_the_host_namespace_with_their_env(hosts: SSHHosts, tmp_path: Path) -> None:
    r = runner(hosts, 1)
    addrs = r.output("ip -4 -o addr show")
    assert hosts.ips[1] in addrs and hosts.ips[0] not in addrs
    out = r.output('echo "$RAYFIELD_TOKEN:$X"', {"RAYFIELD_TOKEN": "t0k en'$x", "X": "2"})
    assert out == "t0k en'$x:2\n"  # exported verbatim, through stdin (not the argv)
    log = tmp_path / "log"
    with open(log, "wb") as f:
        assert r.run("echo out; echo err >&2; exit 3", log=f) == 3
    assert log.read_text() == "out\nerr\n"
    with pytest.raises(command_runner.CommandError, match="exited 7"):
        r.output("exit 7")


def test_sync_up_and_down_with_rsync_and_scp(
    hosts: SSHHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.txt").write_text("A")
    (src / "b.txt").write_text("B")
    r = runner(hosts, 0)
    remote = tmp_path / "remote-rsync"  # the hosts share this filesystem
    r.sync_up(str(src), str(remote))
    assert (remote / "pkg" / "a.txt").read_text() == "A"
    (src / "b.txt").unlink()
    r.sync_up(str(src), str(remote))
    assert not (remote / "b.txt").exists()  # a directory mount mirrors the source
    r.sync_up(str(src / "pkg" / "a.txt"), str(tmp_path / "deep" / "er" / "a.txt"))
    assert (tmp_path / "deep" / "er" / "a.txt").read_text() == "A"
    r.sync_down(str(remote / "pkg" / "a.txt"), str(tmp_path / "down" / "a.txt"))
    assert (tmp_path / "down" / "a.txt").read_text() == "A"

    real_which = command_runner.shutil.which
    monkeypatch.setattr(
        command_runner.shutil, "which", lambda n: None if n == "rsync" else real_which(n)
    )
    scp_remote = tmp_path / "remote-scp"
    r.sync_up(str(src), str(scp_remote))
    assert (scp_remote / "pkg" / "a.txt").read_text() == "A"
    r.sync_down(str(scp_remote / "pkg"), str(tmp_path / "scp-down"))
    assert (tmp_path / "scp-down" / "a.txt").read_text() == "A"
    # ssh, rsync and scp all used the runner's known-hosts file (its name has a space).
    known = r.known_hosts
    assert known is not None and stat.S_IMODE(known.stat().st_mode) == 0o600
    assert hosts.ips[0] in {line.split()[0] for line in known.read_text().splitlines()}


def test_updates_run_in_parallel_on_two_hosts(
    hosts: SSHHosts, tmp_path: Path, worker_updaters: MakeUpdaters
) -> None:
    mount = tmp_path / "app"
    mount.mkdir()
    (mount / "main.py").write_text("print('v1')")
    out = tmp_path / "out"
    out.mkdir()
    cfg = ssh_config(
        tmp_path,
        file_mounts={str(tmp_path / "mounted"): str(mount)},
        setup_commands=[f'ip -4 -o addr show > {out}/addr-"$RAYFIELD_NODE_IP"'],
        worker_start_ray_commands=[
            f'touch {out}/start-"$RAYFIELD_NODE_IP"-begin',
            # Both hosts wait for each other: the updates must run at the same time.
            f"for i in $(seq 100); do [ $(ls {out} | grep -c begin) = 2 ] && exit 0; "
            "sleep 0.1; done; exit 9",
        ],
    )
    updaters, provider = worker_updaters(
        cfg,
        [runner(hosts, 0), runner(hosts, 1)],
        [{"RAYFIELD_NODE_IP": ip} for ip in hosts.ips[:2]],
        ssh_timeout_s=20,
    )
    threads = [threading.Thread(target=u.run) for u in updaters]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i, u in enumerate(updaters):
        assert u.error is None, (u.error, u.log_path.read_text())
        assert provider.node_tags(u.node_id)[TAG_NODE_STATUS] == STATUS_UP_TO_DATE
        assert hosts.ips[i] in (out / f"addr-{hosts.ips[i]}").read_text()  # ran on its host
        assert "==> file_mounts (syncing-files)" in u.log_path.read_text()
    assert (tmp_path / "mounted" / "main.py").read_text() == "print('v1')"
    seen = set(provider.statuses)
    assert {STATUS_WAITING_FOR_SSH, STATUS_SYNCING_FILES, STATUS_SETTING_UP} <= seen


def test_a_failing_command_and_a_host_without_sshd(
    hosts: SSHHosts, tmp_path: Path, worker_updaters: MakeUpdaters
) -> None:
    cfg = ssh_config(tmp_path, setup_commands=["echo about to fail; false"])
    (failing,), provider = worker_updaters(cfg, [runner(hosts, 0)], ssh_timeout_s=20)
    assert not failing.run()
    assert provider.node_tags("n0")[TAG_NODE_STATUS] == STATUS_UPDATE_FAILED
    assert "about to fail" in failing.log_path.read_text()
    # An address on the hosts' subnet that nobody answers at.
    nobody = SSHCommandRunner(
        hosts.ips[0].rsplit(".", 1)[0] + ".250", "root", hosts.ssh_private_key, connect_timeout_s=1
    )
    (unreachable,), provider = worker_updaters(cfg, [nobody], ssh_timeout_s=2)
    assert not unreachable.run()
    assert "did not answer ssh within 2 s" in (unreachable.error or "")
    assert provider.node_tags("n0")[TAG_NODE_STATUS] == STATUS_UPDATE_FAILED


def test_host_keys_are_pinned_and_a_changed_one_is_refused(
    hosts: SSHHosts, tmp_path: Path, worker_updaters: MakeUpdaters
) -> None:
    ip = hosts.ips[0]
    known = tmp_path / "known_hosts"
    r = SSHCommandRunner(ip, hosts.ssh_user, hosts.ssh_private_key, known_hosts=known)
    assert r.output("echo first") == "first\n"
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    (recorded,) = known.read_text().splitlines()  # accept-new: recorded at first contact
    assert recorded.split()[0] == ip
    assert r.output("echo again") == "again\n"  # the same key again: accepted

    # Another machine answers at that address: its key is not the one recorded.
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key = Path(f"{other}.pub").read_text().split()[:2]
    known.write_text(f"{ip} {key_type} {key}\n")
    ran = tmp_path / "ran"
    assert r.run(f"touch {ran}") == 255
    with pytest.raises(command_runner.CommandError, match="Host key verification failed"):
        r.output("true")
    assert not ran.exists()  # nothing ran on the impostor
    with pytest.raises(command_runner.CommandError, match=r"copying .* failed \(exit"):
        r.sync_up(str(known), str(tmp_path / "copied"))
    assert not (tmp_path / "copied").exists()

    # The node updater fails at once (not after ssh_timeout_s), saying what to do.
    (updater,), provider = worker_updaters(ssh_config(tmp_path), [r], ssh_timeout_s=300)
    assert not updater.run()
    assert provider.node_tags("n0")[TAG_NODE_STATUS] == STATUS_UPDATE_FAILED
    assert f"ssh refused the host key of {ip}" in (updater.error or "")
    assert f"ssh-keygen -R {ip} -f {known}" in (updater.error or "")

    # host_key_checking=False (auth.host_key_checking: false): any key, none recorded.
    lax = SSHCommandRunner(
        ip, hosts.ssh_user, hosts.ssh_private_key, known_hosts=known, host_key_checking=False
    )
    lax.run(f"touch {ran}")
    assert ran.exists()
    assert known.read_text() == f"{ip} {key_type} {key}\n"
