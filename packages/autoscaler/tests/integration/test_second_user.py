"""A second local user who plants or swaps the autoscaler's cluster directory is refused.

The attacker is a real user (``rayfield_second_user``, made with ``useradd``) with a
1777 stand-in for ``/tmp`` (``rayfield_shared_tmp``, the ``TMPDIR`` of every process
here). It listens on a TCP port and writes down every connection made to it, and it
plants cluster directories whose ``state.json``/``launcher.json`` hold a head record
with that port as the GCS address and its own cluster token (in the record, and in a
head session of its own that the record's ``temp_dir`` points at, as a
``local_process`` head's token is read). Then this process's user (root on CI):

- runs ``rayfield-autoscaler up``/``exec``/``get-head-ip``/``monitor``/``down`` when the
  attacker made ``<tmp>/rayfield-autoscaler-<uid>`` first (mode 0777), empty or with a
  planted cluster directory in it;
- runs a monitor on a cluster directory of its own, which the attacker then renames
  away and replaces with its own (the parent handed to the attacker first, standing in
  for a parent the attacker made before an older version created the cluster
  directory in it: only then can another user rename it);
- reads through ``local_process`` and ``local`` provider objects made before such a
  swap, and reads a head token file of the attacker's.

Each must refuse with a message naming the path (the CLI without a traceback), and
nothing may connect to the attacker, launch a node or write into its directories.

Making a user needs root and ``useradd``/``runuser``: without them these tests FAIL,
unless ``RAYFIELD_TESTS_NO_SECOND_USER=1`` says the run knowingly goes without them.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from conftest import processes_under

from rayfield.autoscaler.commands import provider_for
from rayfield.autoscaler.config import load_config
from rayfield.autoscaler.local import LocalNodeProvider
from rayfield.autoscaler.local_process import LocalProcessProvider
from rayfield.autoscaler.node_provider import KIND_HEAD, KIND_WORKER, TAG_NODE_KIND
from rayfield.testing import run_as, wait_for
from rayfield.util import private_files
from rayfield.util.private_files import UnsafeFileError

pytestmark = pytest.mark.timeout(120)

# Runs as the attacker, with the system Python (stdlib only). Prints the address it
# listens at, then does what each line of its stdin says ("mkdir PATH": a directory
# everyone may write; "plant PATH": its own cluster directory at PATH, the one there
# renamed away first) and answers "done".
ATTACKER = textwrap.dedent("""
    import json, os, socket, sys, threading
    home = os.path.join(sys.argv[1], "attacker")
    os.umask(0)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(64)
    address = "127.0.0.1:%d" % tcp.getsockname()[1]
    token = "ab" * 32
    head_dir = os.path.join(home, "head")
    session = os.path.join(head_dir, "session_2000-01-01_00-00-00_1")
    os.makedirs(os.path.join(session, "logs"))

    def write(path, text):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)

    write(os.path.join(session, "token"), token)
    write(os.path.join(session, "node.json"),
          json.dumps({"node_id": "ab" * 14, "pid": os.getpid(), "gcs_address": address}))
    write(os.path.join(session, "cluster.json"),
          json.dumps({"gcs_address": address, "gcs_pid": os.getpid()}))
    head = {"tags": {"rayfield-node-kind": "head", "rayfield-node-status": "up-to-date",
                     "rayfield-user-node-type": "head"},
            "head": True, "temp_dir": head_dir, "ip": "127.0.0.1", "gcs_address": address,
            "token": token, "cluster_node_id": "ab" * 14}
    state = json.dumps({"nodes": {"head-evil": head}})

    def plant(path):
        if os.path.lexists(path):
            os.rename(path, path + ".renamed")
        os.mkdir(path, 0o777)
        for name in ("state.json", "launcher.json"):
            write(os.path.join(path, name), state)
        write(os.path.join(path, "token"), token)

    def serve():
        while True:
            conn, _ = tcp.accept()
            with open(os.path.join(home, "connections"), "a") as f:
                f.write("a connection to %s\\n" % address)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    print(address, flush=True)
    for line in sys.stdin:
        what, path = line.split(" ", 1)
        path = path.strip()
        if what == "mkdir":
            os.mkdir(path, 0o777)
        elif what == "plant":
            plant(path)
        print("done", flush=True)
""")


@dataclass
class Attacker:
    """The attacker's process: where it listens, and its commands."""

    user: pwd.struct_passwd
    shared: Path
    proc: subprocess.Popen[str]
    address: str

    def do(self, what: str, path: Path) -> None:
        """``mkdir`` or ``plant`` ``path`` as the attacker; fails if it could not."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{what} {path}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done", f"the attacker could not {what}"

    def connections(self) -> str:
        """What connected to the attacker ("" when nothing did)."""
        log = self.shared / "attacker" / "connections"
        return log.read_text() if log.exists() else ""


@pytest.fixture
def shared(rayfield_shared_tmp: Path) -> Iterator[Path]:
    """The 1777 stand-in for /tmp; what a failed refusal started under it is killed."""
    yield rayfield_shared_tmp
    for proc in processes_under(rayfield_shared_tmp):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def attacker(rayfield_second_user: pwd.struct_passwd, shared: Path) -> Iterator[Attacker]:
    home = shared / "attacker"
    home.mkdir(mode=0o777)
    os.chown(home, rayfield_second_user.pw_uid, -1)
    proc = run_as(
        rayfield_second_user.pw_name,
        ATTACKER,
        str(shared),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), "the attacker did not start"
        yield Attacker(rayfield_second_user, shared, proc, address)
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()


def victim_env(shared: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYFIELD_")}
    return dict(env, TMPDIR=str(shared))


def autoscaler_dir(shared: Path) -> Path:
    """``<tmp>/rayfield-autoscaler-<uid>`` with ``shared`` as the tmp."""
    return shared / f"rayfield-autoscaler-{os.getuid()}"


def cluster_yaml(path: Path, name: str, min_workers: int = 0) -> Path:
    """A local_process cluster with the default cluster directory."""
    small = {"object_store_memory": 64 << 20}
    cfg = {
        "cluster_name": name,
        "provider": {"type": "local_process"},
        "max_workers": 1,
        "head_node_type": "head",
        "available_node_types": {
            "head": {"resources": {"CPU": 0}, "node_config": small},
            "worker": {
                "resources": {"CPU": 1},
                "min_workers": min_workers,
                "max_workers": 1,
                "node_config": small,
            },
        },
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def refusal(path: Path, user: pwd.struct_passwd) -> str:
    """A pattern of the refusal of ``path`` or of something in it (the nearest directory
    of the attacker's on the way is the one named) as the attacker's."""
    return f"refusing .*{re.escape(str(path))}(/\\S*)? \\(owned by {user.pw_name} "


def victim_processes(shared: Path, attacker: Attacker) -> list[psutil.Process]:
    """The processes whose command line names a path under ``shared``, the attacker's
    aside."""
    theirs = {attacker.proc.pid} | {c.pid for c in psutil.Process(attacker.proc.pid).children()}
    return [p for p in processes_under(shared) if p.pid not in theirs]


def ours_in(root: Path) -> list[Path]:
    """Files and directories of this user under ``root``."""
    return [p for p in root.rglob("*") if os.lstat(p).st_uid == os.getuid()]


def test_the_commands_refuse_an_autoscaler_dir_another_user_made_first(
    attacker: Attacker, shared: Path, tmp_path: Path
) -> None:
    parent = autoscaler_dir(shared)
    attacker.do("mkdir", parent)
    attacker.do("plant", parent / "planted")
    planted = cluster_yaml(tmp_path / "planted.yaml", "planted")
    fresh = cluster_yaml(tmp_path / "fresh.yaml", "fresh")
    cli = [sys.executable, "-m", "rayfield.autoscaler.cli"]
    attempts = {
        "up (no cluster directory yet)": [*cli, "up", str(fresh), "-y"],
        "up (a planted one)": [*cli, "up", str(planted), "-y"],
        "exec": [*cli, "exec", str(planted), "echo ran"],
        "get-head-ip": [*cli, "get-head-ip", str(planted)],
        "monitor": [*cli, "monitor", str(planted), "--no-follow"],
        "down": [*cli, "down", str(planted), "-y"],
    }
    problems = []
    for what, args in attempts.items():
        out = subprocess.run(
            args, capture_output=True, text=True, env=victim_env(shared), timeout=90
        )
        said = out.stdout + out.stderr
        if out.returncode == 0:
            problems.append(f"{what} was not refused:\n{said}")
        elif f"refusing the autoscaler's directory {parent} " not in said:
            problems.append(f"{what} failed without naming {parent}:\n{said}")
        elif "Traceback" in said:
            problems.append(f"{what} printed a traceback:\n{said}")
    if attacker.connections():
        problems.append(f"connections made to the attacker:\n{attacker.connections()}")
    if ours_in(parent):
        problems.append(f"files of ours in the attacker's {parent}: {ours_in(parent)}")
    if victim_processes(shared, attacker):
        problems.append(f"processes started under {shared}: {victim_processes(shared, attacker)}")
    assert not problems, "\n\n".join(problems)


def _log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_running_monitor_stops_when_its_cluster_dir_is_swapped(
    attacker: Attacker, shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(shared))  # this process's <tmp> too
    config = load_config(cluster_yaml(tmp_path / "c.yaml", "swapped", min_workers=1))
    provider = provider_for(config)  # makes <shared>/rayfield-autoscaler-<uid>/swapped
    parent = autoscaler_dir(shared)
    assert provider.root == parent / "swapped"
    bootstrap = provider.root / "bootstrap.yaml"
    private_files.write_text(bootstrap, yaml.safe_dump(config))
    log = tmp_path / "monitor.log"
    argv = [sys.executable, "-m", "rayfield.autoscaler.monitor", str(bootstrap)]
    with open(log, "wb") as out:
        monitor = subprocess.Popen(
            [*argv, "--interval-s", "0.3"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=victim_env(shared),
        )
    try:
        wait_for(
            lambda: "monitor of 'swapped' started" in _log(log) or monitor.poll() is not None,
            60,
            "the monitor to start",
            interval=0.2,
        )
        assert monitor.poll() is None, _log(log)
        # The parent becomes the attacker's (see the module docstring); it renames the
        # cluster directory away and puts its own, with its head record, in its place.
        os.chown(parent, attacker.user.pw_uid, -1)
        attacker.do("plant", parent / "swapped")
        wait_for(
            lambda: monitor.poll() is not None or attacker.connections(),
            60,
            "the monitor to stop (or to connect to the attacker)",
            interval=0.2,
        )
    finally:
        if monitor.poll() is None:
            monitor.kill()
        monitor.wait(10)
    text = _log(log)
    assert attacker.connections() == "", text
    assert monitor.returncode == 1, text
    assert re.search("the monitor stops: " + refusal(parent, attacker.user), text), text
    planted = json.loads((parent / "swapped" / "state.json").read_text())
    assert list(planted["nodes"]) == ["head-evil"]  # no launch recorded there
    assert ours_in(parent / "swapped") == []
    assert victim_processes(shared, attacker) == []


@pytest.mark.parametrize("kind", ["local_process", "local"])
def test_provider_objects_refuse_to_read_a_swapped_cluster_dir(
    kind: str, attacker: Attacker, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    provider: Any = (
        LocalProcessProvider({"type": kind}, "c")
        if kind == "local_process"
        else LocalNodeProvider({"type": kind, "head_ip": "127.0.0.1"}, "c")
    )
    parent = autoscaler_dir(shared)
    assert provider.root == parent / "c"
    os.chown(parent, attacker.user.pw_uid, -1)  # as in the monitor's test
    attacker.do("plant", parent / "c")
    refused = refusal(parent, attacker.user)
    reads = {
        "non_terminated_nodes": lambda: provider.non_terminated_nodes({}),
        "head_id": lambda: provider.head_id(),
        "gcs_address": lambda: provider.gcs_address("head-evil"),
        "token": lambda: provider.token("head-evil"),
        "create_node": lambda: provider.create_node(
            {"resources": {"CPU": 1}}, {TAG_NODE_KIND: KIND_WORKER}, 1
        ),
    }
    for what, read in reads.items():
        with pytest.raises(UnsafeFileError, match=refused):
            read()
            pytest.fail(f"{what} read the attacker's records")
    assert attacker.connections() == ""
    assert ours_in(parent / "c") == []
    assert victim_processes(shared, attacker) == []


def test_a_head_token_file_of_another_user_is_refused(
    attacker: Attacker, shared: Path, tmp_path: Path
) -> None:
    provider = LocalProcessProvider({"type": "local_process", "cluster_dir": str(tmp_path)}, "c")
    head_dir = shared / "attacker" / "head"  # the attacker's head session and token
    record = {"tags": {TAG_NODE_KIND: KIND_HEAD}, "head": True, "temp_dir": str(head_dir)}
    provider.replace_records({"head-1": {**record, "gcs_address": attacker.address}})
    assert (next(head_dir.glob("session_*")) / "token").read_text() == "ab" * 32
    with pytest.raises(UnsafeFileError, match=refusal(shared / "attacker", attacker.user)):
        provider.token("head-1")
    assert attacker.connections() == ""
