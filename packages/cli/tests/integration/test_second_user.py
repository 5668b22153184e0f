"""A second local user who plants a session where rayfield looks for one is refused.

The attacker is a real user (made with ``useradd``) who creates the session roots first,
mode 0777: both ``<tmp>/rayfield`` and the per-user ``<tmp>/rayfield-<uid>`` of the user
running the tests. In each it plants a fake session (``session_latest``, ``node.json`` and
``cluster.json``) naming a Unix socket and a TCP port it listens on, and it writes down
every connection made to them. This process's user (root on CI) then runs, with
``TMPDIR`` pointed at a private 1777 directory, ``init(address="auto")``, an embedded
``init()``, ``rayfield start --head`` and ``rayfield status``: each must refuse with a
message naming the root, and nothing may connect to the attacker or write into its root.

Making a user needs root and ``useradd``/``runuser``: without them this test FAILS,
unless ``RAYFIELD_TESTS_NO_SECOND_USER=1`` says the run knowingly goes without it.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterutil import CLI

from rayfield.testing import run_as

# Runs as the attacker, with the system Python (stdlib only).
PLANT = textwrap.dedent("""
    import json, os, socket, sys, threading
    shared, victim_uid = sys.argv[1], sys.argv[2]
    os.umask(0)
    log = os.path.join(shared, "attacker", "connections")
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(64)
    port = tcp.getsockname()[1]
    listeners = [(tcp, "tcp")]
    for name in ("rayfield", "rayfield-" + victim_uid):
        root = os.path.join(shared, name)
        os.mkdir(root, 0o777)
        session = os.path.join(root, "session_evil")
        for d in (session, session + "/logs", session + "/sockets"):
            os.mkdir(d, 0o777)
        sock_path = session + "/sockets/node.sock"
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(sock_path)
        os.chmod(sock_path, 0o777)
        unix.listen(64)
        listeners.append((unix, "unix " + sock_path))
        address = "127.0.0.1:%d" % port
        node = {"socket": sock_path, "resources": {"CPU": 1.0}, "pid": os.getpid(),
                "object_store_memory": 1 << 20, "node_id": "ab" * 14,
                "gcs_address": address}
        for file, value in (("node.json", node),
                            ("cluster.json", {"gcs_address": address, "gcs_pid": os.getpid()})):
            with open(os.path.join(session, file), "w") as f:
                json.dump(value, f)
        with open(os.path.join(session, "token"), "w") as f:
            f.write("ab" * 32)
        os.chmod(os.path.join(session, "token"), 0o600)
        os.symlink(session, os.path.join(root, "session_latest"))

    def serve(sock, what):
        while True:
            conn, _ = sock.accept()
            with open(log, "a") as f:
                f.write(what + "\\n")
            conn.close()

    for sock, what in listeners:
        threading.Thread(target=serve, args=(sock, what), daemon=True).start()
    print(port, flush=True)
    sys.stdin.read()  # until the test closes stdin
""")


@pytest.fixture
def shared(rayfield_shared_tmp: Path) -> Iterator[Path]:
    """A private stand-in for /tmp (mode 1777, as /tmp): TMPDIR of every process here."""
    yield rayfield_shared_tmp
    for root in rayfield_shared_tmp.glob("rayfield*"):  # stop what a failed refusal started
        subprocess.run(
            [*CLI, "stop", "--temp-dir", str(root), "--grace-period", "3"],
            capture_output=True,
            env=_env(rayfield_shared_tmp),
            timeout=60,
        )


def _env(shared: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYFIELD_")}
    return dict(env, TMPDIR=str(shared))


def _run(args: list[str], shared: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, env=_env(shared), timeout=90)
    except subprocess.TimeoutExpired as exc:  # e.g. a driver stuck talking to the attacker
        return subprocess.CompletedProcess(args, -9, str(exc.stdout), f"timed out: {exc}")


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_session_planted_by_another_user_is_refused_everywhere(
    rayfield_second_user: pwd.struct_passwd, shared: Path, tmp_path: Path
) -> None:
    (shared / "attacker").mkdir(mode=0o777)
    attacker_uid = rayfield_second_user.pw_uid
    os.chown(shared / "attacker", attacker_uid, -1)
    plant = run_as(
        rayfield_second_user.pw_name,
        PLANT,
        str(shared),
        str(os.getuid()),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert plant.stdout is not None
        assert plant.stdout.readline().strip().isdigit(), "the attacker did not start"
        my_root = shared / f"rayfield-{os.getuid()}"
        assert os.stat(my_root).st_uid == attacker_uid  # it got there first

        attempts = {
            "init(address='auto')": _python("""
                import rayfield as rf
                rf.init(address="auto")
                print("connected")
            """),
            "embedded init()": _python("""
                import rayfield as rf
                rf.init(num_cpus=1, object_store_memory=64 << 20)
                print(rf.get(rf.put("started")))
                rf.shutdown()
            """),
            "rayfield start --head": [*CLI, "start", "--head", "--port", "0", "--num-cpus", "1"],
            "rayfield status": [*CLI, "status"],
        }
        problems = []
        for what, args in attempts.items():
            out = _run(args, shared)
            said = out.stdout + out.stderr
            if out.returncode == 0:
                problems.append(f"{what} was not refused:\n{said}")
            elif "refusing the session root" not in said or str(my_root) not in said:
                problems.append(f"{what} failed without saying why:\n{said}")
            elif what.startswith("rayfield") and "Traceback" in said:
                problems.append(f"{what} printed a traceback:\n{said}")
        connections = shared / "attacker" / "connections"
        if connections.exists():
            problems.append(f"connections made to the attacker:\n{connections.read_text()}")
        for root in shared.glob("rayfield*"):  # nothing of ours went into the attacker's roots
            mine = [p for p in root.rglob("*") if os.lstat(p).st_uid == os.getuid()]
            if mine:
                problems.append(f"files of ours in the attacker's {root}: {mine}")
        assert not problems, "\n\n".join(problems)

        # A root of one's own still works, with the attacker's roots where they are.
        ok = _run(
            _python(f"""
                import rayfield as rf
                rf.init(num_cpus=1, object_store_memory=64 << 20, temp_dir={str(tmp_path)!r})
                print(rf.get(rf.put("started")))
                rf.shutdown()
            """),
            shared,
        )
        assert ok.returncode == 0 and "started" in ok.stdout, ok.stderr
    finally:
        assert plant.stdin is not None
        plant.stdin.close()
        plant.wait(timeout=10)
