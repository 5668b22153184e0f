"""SSH hosts for tests: network namespaces of their own, each with an address on a
private bridge and its own ``sshd`` on port 22, reached as root with a generated key.

Only this machine's root namespace (on the bridge) and the namespaces reach each other:
the namespaces have no route elsewhere. The filesystem is shared, so a command run on a
host sees this checkout and its virtualenv. Needs root, ``ip``, and OpenSSH's server and
client plus rsync (``python tools/install_sshd.py`` installs them); a test that cannot
get them fails saying so.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


def _programs() -> dict[str, str]:
    sys.path.insert(0, str(TOOLS))
    try:
        import install_sshd
    finally:
        sys.path.remove(str(TOOLS))
    found = install_sshd.find_programs()
    if found is None or os.geteuid() != 0:
        raise AssertionError(
            "the SSH tests need root and sshd, ssh, ssh-keygen, rsync: run "
            "`python tools/install_sshd.py` as root (nox -s tests does), then rerun"
        )
    return found


def _free_subnet() -> ipaddress.IPv4Network:
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    used = [
        ipaddress.ip_network(r.split()[0], strict=False)
        for r in routes.splitlines()
        if "/" in r.split()[0]
    ]
    for _ in range(100):
        net = ipaddress.ip_network(
            f"10.{secrets.randbelow(200) + 40}.{secrets.randbelow(250) + 1}.0/24"
        )
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free private /24 for the test bridge")


def _wait_port(ip: str, port: int, timeout_s: float) -> None:
    def listens() -> bool:
        with socket.create_connection((ip, port), timeout=1):
            return True

    wait_for(listens, timeout_s, f"sshd to listen at {ip}:{port}", interval=0.05)


def _kill_namespace(ns: str) -> None:
    for _ in range(50):
        pids = subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True
        ).stdout.split()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.1)


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

    tag = secrets.token_hex(3)
    bridge = f"rfb{tag}"
    net = _free_subnet()
    hosts_ = list(net.hosts())
    bridge_ip = str(hosts_[0])
    namespaces: list[str] = []
    sshds: list[subprocess.Popen[bytes]] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{bridge_ip}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        ips = []
        for i in range(count):
            ns, outer, inner, ip = (
                f"rf16-{tag}-{i}",
                f"rfv{tag}{i}a",
                f"rfv{tag}{i}b",
                str(hosts_[10 + i]),
            )
            _ip("netns", "add", ns)
            namespaces.append(ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", bridge, "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            sshd = [
                "ip", "netns", "exec", ns, programs["sshd"], "-D", "-e", "-f", "/dev/null",
                "-h", str(host_key),
                "-o", f"ListenAddress={ip}:22",
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
            ips.append(ip)
        for ip in ips:
            _wait_port(ip, 22, 20)
        yield SSHHosts(ips, namespaces, "root", key, bridge_ip)
    finally:
        for proc in sshds:
            proc.terminate()
        for ns in namespaces:
            _kill_namespace(ns)
        for proc in sshds:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for ns in namespaces:
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", ns)
        with contextlib.suppress(RuntimeError):
            _ip("link", "del", bridge)


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
