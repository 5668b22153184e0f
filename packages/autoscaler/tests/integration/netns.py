"""SSH hosts for tests: network namespaces of their own, each with an address on a
private bridge and its own ``sshd`` on port 22, reached as root with a generated key.

The namespaces, veth pairs and bridge come from ``tools/netns_bridge.py`` (shared with
the cross-node benchmark). Only this machine's root namespace (on the bridge) and the
namespaces reach each other: the namespaces have no route elsewhere. The filesystem is
shared, so a command run on a host sees this checkout and its virtualenv. Needs root,
``ip``, and OpenSSH's server and client plus rsync (``python tools/install_sshd.py``
installs them); a test that cannot get them fails saying so.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from rayfield.testing import wait_for

TOOLS = Path(__file__).resolve().parents[4] / "tools"


@dataclass
class SSHHosts:
    """What a test needs to reach the hosts."""

    ips: list[str]
    namespaces: list[str]
    ssh_user: str
    ssh_private_key: Path
    bridge_ip: str


def _tool(name: str) -> ModuleType:
    """The module ``tools/<name>.py`` of this checkout."""
    sys.path.insert(0, str(TOOLS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(TOOLS))


def _programs() -> dict[str, str]:
    found = _tool("install_sshd").find_programs()
    if found is None or os.geteuid() != 0:
        raise AssertionError(
            "the SSH tests need root and sshd, ssh, ssh-keygen, rsync: run "
            "`python tools/install_sshd.py` as root (nox -s tests does), then rerun"
        )
    return found


def _wait_port(ip: str, port: int, timeout_s: float) -> None:
    def listens() -> bool:
        with socket.create_connection((ip, port), timeout=1):
            return True

    wait_for(listens, timeout_s, f"sshd to listen at {ip}:{port}", interval=0.05)


@contextlib.contextmanager
def ssh_hosts(workdir: Path, count: int) -> Iterator[SSHHosts]:
    """``count`` hosts with sshd, torn down (every process in them killed, namespaces
    and bridge deleted) on exit."""
    programs = _programs()
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o700)
    key = workdir / "id_ed25519"
    host_key = workdir / "host_ed25519"
    for path in (key, host_key):
        subprocess.run(
            [programs["ssh-keygen"], "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True
        )
    authorized = workdir / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    os.chmod(authorized, 0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir

    sshds: list[subprocess.Popen[bytes]] = []
    with _tool("netns_bridge").bridged_namespaces(count, prefix="rf16") as net:
        try:
            for i, ns in enumerate(net.namespaces):
                sshd = [
                    *ns.exec_prefix(), programs["sshd"], "-D", "-e", "-f", "/dev/null",
                    "-h", str(host_key),
                    "-o", f"ListenAddress={ns.ip}:22",
                    "-o", f"AuthorizedKeysFile={authorized}",
                    "-o", "PermitRootLogin=prohibit-password",
                    "-o", "PasswordAuthentication=no",
                    "-o", "KbdInteractiveAuthentication=no",
                    "-o", "UsePAM=no",
                    "-o", "StrictModes=no",
                    "-o", f"PidFile={workdir}/sshd-{i}.pid",
                    "-o", "Subsystem=sftp internal-sftp",
                    "-o", "MaxStartups=100",
                    "-o", "MaxSessions=100",
                ]  # fmt: skip
                log = open(workdir / f"sshd-{i}.log", "ab")  # noqa: SIM115 (closed with the process)
                sshds.append(
                    subprocess.Popen(
                        sshd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                )
                log.close()
            ips = [ns.ip for ns in net.namespaces]
            for ip in ips:
                _wait_port(ip, 22, 20)
            names = [ns.name for ns in net.namespaces]
            yield SSHHosts(ips, names, "root", key, net.bridge_ip)
        finally:
            for proc in sshds:
                proc.terminate()
            for proc in sshds:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        # leaving bridged_namespaces kills what is left in the namespaces, deletes them
        # and the bridge


def namespaces_left(hosts: SSHHosts) -> list[str]:
    """Which of ``hosts``' namespaces still exist."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    return [ns for ns in hosts.namespaces if ns in names]


def node_commands() -> tuple[str, str]:
    """``(stop, start)``: the `rayfield stop` and `rayfield start` command lines (of this
    interpreter's environment) a `local`-provider cluster YAML gives its nodes, reading
    the node's IP, temp dir and resources from the variables the updater sets."""
    rf = Path(sys.executable).parent / "rayfield"
    stop = f'{rf} stop --temp-dir="$RAYFIELD_NODE_TEMP_DIR"'
    start = (
        f'{rf} start --node-ip-address="$RAYFIELD_NODE_IP" '
        '--temp-dir="$RAYFIELD_NODE_TEMP_DIR" $RAYFIELD_RESOURCE_ARGS'
    )
    return stop, start
