"""Network namespaces joined to this machine by veth pairs on a private bridge.

Each namespace is one "host": a veth pair whose inner end is moved into it with an address
of its own on a free private /24 (``10.x.y.0/24``), whose outer end joins a bridge in the
root namespace; the bridge holds the subnet's first address, so this machine (root
namespace) and the namespaces reach each other, and nothing else does (the namespaces
have no other route). The filesystem is shared: a process started in a namespace sees the
same files and virtualenvs.

Used by the autoscaler's SSH tests (``packages/autoscaler/tests/integration/netns.py``
starts an ``sshd`` in each) and by the cross-node benchmark
(``packages/cli/benchmarks/bench_cluster.py --net netns``: node 2 and the broadcast's
nodes each in a namespace, the head on the bridge's address).

Clean-up: leaving :func:`bridged_namespaces` (normally, on an exception, Ctrl-C, or
SIGTERM/SIGHUP while no other handler is installed) kills every process left in the
namespaces and deletes the namespaces, the veth pairs and the bridge. What a process
killed outright (SIGKILL) left behind is deleted by the next :func:`bridged_namespaces`
(or :func:`reap_stale`): each set is recorded under ``/run/rayfield-netns`` (0700) with
its owner's pid and start time before anything is made.

Needs root and iproute2's ``ip``; otherwise :class:`NetnsUnavailable`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BridgedNet",
    "Namespace",
    "NetnsUnavailable",
    "available",
    "bridged_namespaces",
    "kill_namespace",
    "reap_stale",
]

RECORDS = Path("/run/rayfield-netns")
MAX_NAMESPACES = 99  # two digits in a veth name: "rfv" + 6 hex + index + "a|b" <= 15 chars


class NetnsUnavailable(RuntimeError):
    """This process cannot make network namespaces (not root, or no ``ip``)."""


@dataclass(frozen=True)
class Namespace:
    """One namespace: its name (for ``ip netns exec``), its IPv4 address on the bridge,
    and the outer (root namespace) end of its veth pair."""

    name: str
    ip: str
    veth: str

    def exec_prefix(self) -> list[str]:
        """The argv prefix that runs a command inside this namespace."""
        return ["ip", "netns", "exec", self.name]


@dataclass
class BridgedNet:
    """The bridge (name, its address in the root namespace, the /24) and the namespaces."""

    bridge: str
    bridge_ip: str
    subnet: str
    namespaces: list[Namespace] = field(default_factory=list)

    def bytes_through(self) -> int:
        """Bytes the bridge has received plus sent so far (its kernel counters)."""
        total = 0
        for kind in ("rx_bytes", "tx_bytes"):
            path = Path(f"/sys/class/net/{self.bridge}/statistics/{kind}")
            with contextlib.suppress(OSError, ValueError):
                total += int(path.read_text())
        return total


def available() -> str | None:
    """None when namespaces can be made here, else why not (one line)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip`"
    return None


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    """A random private /24 that no route of the root namespace overlaps."""
    used = []
    for line in _ip("-4", "route").splitlines():
        first = line.split()[0] if line.split() else ""
        if "/" in first:
            used.append(ipaddress.ip_network(first, strict=False))
    for _ in range(100):
        net = ipaddress.ip_network(
            f"10.{secrets.randbelow(200) + 40}.{secrets.randbelow(250) + 1}.0/24"
        )
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free private /24 for the bridge")


def kill_namespace(name: str, timeout_s: float = 5.0) -> None:
    """SIGKILL every process in namespace ``name`` until none is left (or ``timeout_s``)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        pids = _ip("netns", "pids", name, check=False).split()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.05)


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks), None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _teardown(bridge: str, namespaces: list[str], veths: list[str]) -> None:
    """Delete what a set made: processes, namespaces (their veth ends go with them), any
    outer veth end left (a set that failed half-way), the bridge. Missing parts are fine."""
    for ns in namespaces:
        kill_namespace(ns)
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)
    for veth in veths:
        if Path(f"/sys/class/net/{veth}").exists():
            _ip("link", "del", veth, check=False)
    if Path(f"/sys/class/net/{bridge}").exists():
        _ip("link", "del", bridge, check=False)


def reap_stale() -> int:
    """Delete the sets whose owner process is gone (killed before it could clean up);
    how many."""
    if not RECORDS.is_dir():
        return 0
    reaped = 0
    for record in sorted(RECORDS.glob("*.json")):
        try:
            data: dict[str, Any] = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if _start_time(int(data["pid"])) == data["start_time"]:
            continue  # its owner still runs
        _teardown(data["bridge"], data["namespaces"], data["veths"])
        record.unlink(missing_ok=True)
        reaped += 1
    return reaped


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` in the main thread while
    inside (so that ``finally`` blocks run), where nothing but the default action was
    installed; the old handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def bridged_namespaces(count: int, prefix: str = "rfns") -> Iterator[BridgedNet]:
    """``count`` namespaces on a new bridge; all deleted on exit (see the module docstring).

    Args:
        count: how many namespaces (1..99).
        prefix: the start of the namespaces' names (``<prefix>-<tag>-<index>``).

    Yields:
        The bridge and the namespaces; the bridge has the subnet's first address, the
        namespaces ``.11``, ``.12``, ...

    Raises:
        NetnsUnavailable: not root, or no ``ip``.
        ValueError: ``count`` out of range.
        RuntimeError: an ``ip`` command failed (its message), no free /24.
    """
    why = available()
    if why:
        raise NetnsUnavailable(why)
    if not 1 <= count <= MAX_NAMESPACES:
        raise ValueError(f"count must be 1..{MAX_NAMESPACES}, not {count}")
    reap_stale()
    tag = secrets.token_hex(3)
    net = _free_subnet()
    hosts = list(net.hosts())
    bridge = f"rfb{tag}"
    names = [f"{prefix}-{tag}-{i}" for i in range(count)]
    veths = [f"rfv{tag}{i}a" for i in range(count)]
    RECORDS.mkdir(mode=0o700, exist_ok=True)
    os.chmod(RECORDS, 0o700)
    record = RECORDS / f"{tag}.json"
    mine = {"pid": os.getpid(), "start_time": _start_time(os.getpid())}
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({**mine, "bridge": bridge, "namespaces": names, "veths": veths}, f)
    result = BridgedNet(bridge, str(hosts[0]), str(net))
    with _signals_raise():
        try:
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{hosts[0]}/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
            for i, (ns, outer) in enumerate(zip(names, veths, strict=True)):
                inner, ip = f"rfv{tag}{i}b", str(hosts[10 + i])
                _ip("netns", "add", ns)
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", ns)
                _ip("link", "set", outer, "master", bridge, "up")
                _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", inner)
                _ip("-n", ns, "link", "set", inner, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                result.namespaces.append(Namespace(ns, ip, outer))
            yield result
        finally:
            _teardown(bridge, names, veths)
            record.unlink(missing_ok=True)
