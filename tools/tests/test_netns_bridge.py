"""tools/netns_bridge.py: namespaces that reach the bridge, and nothing left behind after a
normal exit, an exception, SIGTERM, or an owner killed outright (needs root and ``ip``;
skipped otherwise)."""

from __future__ import annotations

import importlib
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent


sys.path.insert(0, str(TOOLS))  # the tools import each other as siblings, so may this
nb = importlib.import_module("netns_bridge")
pytestmark = pytest.mark.skipif(nb.available() is not None, reason=str(nb.available()))

# A process that makes two namespaces, prints them as JSON and waits to be killed.
OWNER = f"""
import json, sys, time
sys.path.insert(0, {str(TOOLS)!r})
import netns_bridge
with netns_bridge.bridged_namespaces(2, prefix="rftest") as net:
    print(json.dumps({{"bridge": net.bridge, "namespaces": [n.name for n in net.namespaces]}}),
          flush=True)
    time.sleep(60)
"""


def _listed() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _gone(bridge: str, namespaces: list[str]) -> bool:
    return not Path(f"/sys/class/net/{bridge}").exists() and not set(namespaces) & _listed()


@pytest.fixture
def owner() -> Iterator[tuple[subprocess.Popen[str], dict[str, object]]]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        made = json.loads(proc.stdout.readline())
        yield proc, made
    finally:
        proc.kill()
        proc.wait()
        nb.reap_stale()


def test_namespaces_reach_the_bridge_and_are_deleted_on_exit() -> None:
    with nb.bridged_namespaces(2, prefix="rftest") as net:
        names = [ns.name for ns in net.namespaces]
        assert len({ns.ip for ns in net.namespaces}) == 2
        with socket.create_server((net.bridge_ip, 0)) as server:
            port = server.getsockname()[1]
            for ns in net.namespaces:
                code = (
                    "import socket; s = socket.create_connection"
                    f"(({net.bridge_ip!r}, {port}), timeout=5); print(s.getsockname()[0])"
                )
                done = subprocess.run(
                    [*ns.exec_prefix(), sys.executable, "-c", code],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                assert done.stdout.strip() == ns.ip, done.stderr
                server.accept()[0].close()
        assert set(names) <= _listed()
    assert _gone(net.bridge, names)
    assert not list(nb.RECORDS.glob("*.json")) or all(
        json.loads(p.read_text())["bridge"] != net.bridge for p in nb.RECORDS.glob("*.json")
    )


def test_an_exception_inside_deletes_everything() -> None:
    with pytest.raises(KeyError), nb.bridged_namespaces(1, prefix="rftest") as net:
        raise KeyError("boom")
    assert _gone(net.bridge, [ns.name for ns in net.namespaces])


def test_sigterm_deletes_everything(owner: tuple[subprocess.Popen[str], dict]) -> None:
    proc, made = owner
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert _gone(made["bridge"], made["namespaces"])


def test_a_killed_owners_set_is_reaped(owner: tuple[subprocess.Popen[str], dict]) -> None:
    proc, made = owner
    proc.kill()
    proc.wait()
    assert set(made["namespaces"]) <= _listed()  # SIGKILL: nothing could clean up
    assert nb.reap_stale() >= 1
    assert _gone(made["bridge"], made["namespaces"])


def test_count_out_of_range_is_refused() -> None:
    before = set(nb.RECORDS.glob("*.json"))
    with pytest.raises(ValueError, match="count"), nb.bridged_namespaces(0):
        pass
    assert set(nb.RECORDS.glob("*.json")) <= before  # nothing made, nothing recorded
