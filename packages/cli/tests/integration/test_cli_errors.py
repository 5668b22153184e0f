"""CLI failures end with one line that says what to do, a non-zero exit and no traceback.

Real processes: a head started with a private --temp-dir and port 0; each failing
command runs against it (or against nothing) in its own temp dir.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterutil import rayfield_cmd, start_nodes, stop_in_background

from rayfield.util.cluster import rayfield_processes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A head with a dashboard: (its address, its session directory)."""
    temp_dir = tmp_path_factory.mktemp("rf")
    dashboard = ("--include-dashboard", "--dashboard-port", "0")
    address = start_nodes(temp_dir, count=1, head_args=dashboard)
    try:
        yield address, (temp_dir / "session_latest").resolve()
    finally:
        stop_in_background(temp_dir)


@pytest.fixture
def head(cluster: tuple[str, Path]) -> str:
    return cluster[0]


def fails(*args: str, code: int = 1) -> str:
    """Run ``rayfield ARGS``; it must exit with ``code`` and one ``Error:`` line, and no
    traceback. Returns that line without ``Error: ``."""
    out = rayfield_cmd(*args, check=False)
    said = out.stdout + out.stderr
    assert out.returncode == code, said
    assert "Traceback" not in said, said
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, said
    return errors[0][len("Error: ") :]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_wrong_token_is_one_line(head: str, tmp_path: Path) -> None:
    line = fails("start", "--address", head, "--token", "ab" * 32, "--temp-dir", str(tmp_path))
    assert line == (
        f"the head at {head} refused this node's token: pass the cluster's token with "
        "--token or RAYFIELD_TOKEN"
    )
    assert not rayfield_processes(tmp_path)  # the refused node is gone


def test_a_head_that_is_not_there(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    line = fails("start", "--address", address, "--token", "ab" * 32, "--temp-dir", str(tmp_path))
    assert line.startswith(f"no rayfield head answers at {address}") and "check the" in line
    assert "is not HOST:PORT" in fails("start", "--address", "nope", code=2)


def test_busy_ports(cluster: tuple[str, Path], tmp_path: Path) -> None:
    head, session = cluster
    port = head.rpartition(":")[2]
    line = fails("start", "--head", "--port", port, "--temp-dir", str(tmp_path / "a"))
    assert f"the GCS cannot listen on 127.0.0.1:{port}" in line and "--port (0" in line
    token = ("--token", "ab" * 32)
    line = fails(
        "start", "--address", head, "--node-manager-port", port, *token, "--temp-dir", str(tmp_path)
    )
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--node-manager-port" in line
    dashboard_port = json.loads((session / "dashboard.json").read_text())["url"].split(":")[2]
    line = fails(
        "start",
        "--head",
        "--port",
        "0",
        "--include-dashboard",
        "--dashboard-port",
        dashboard_port.strip("/"),
        "--temp-dir",
        str(tmp_path / "c"),
    )
    assert "the dashboard cannot listen on" in line and "--dashboard-port" in line
    assert not rayfield_processes(tmp_path / "c")  # what it started before is stopped


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--resources", "nope"], "is not a JSON object of numbers"),
        (["--resources", "[1]"], "is not a JSON object of numbers"),
        (["--resources", '{"x": NaN}'], "'x' must be a finite number >= 0"),
        (["--resources", '{"x": -1}'], "'x' must be a finite number >= 0"),
        (["--num-cpus", "nan"], "must be a finite number >= 0, not nan"),
        (["--num-gpus", "inf"], "must be a finite number >= 0, not inf"),
        (["--gcs-reconnect-timeout-s", "-1"], "must be a finite number >= 0, not -1"),
        (["--dashboard-tls-cert", "c.pem"], "go together"),
    ],
)
def test_bad_flags(flags: list[str], says: str, tmp_path: Path) -> None:
    assert says in fails("start", "--head", *flags, "--temp-dir", str(tmp_path), code=2)


def test_temp_dirs_that_cannot_be_used(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    line = fails("start", "--head", "--port", "0", "--temp-dir", str(tmp_path / "a_file" / "x"))
    assert line.startswith("cannot create a session directory under") and "--temp-dir" in line
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    line = fails("start", "--head", "--port", "0", "--temp-dir", str(shared))
    assert line.startswith(f"refusing the session root {shared}") and "chmod go-w" in line
    for command in ("status", "dashboard", "list"):
        args = [command, "actors"] if command == "list" else [command]
        assert "refusing the session root" in fails(*args, "--temp-dir", str(shared))


def test_commands_with_no_cluster(tmp_path: Path) -> None:
    for args in (["status"], ["dashboard"], ["list", "actors"], ["timeline"]):
        line = fails(*args, "--temp-dir", str(tmp_path))
        assert "no running rayfield cluster" in line or "no rayfield cluster runs" in line, line
    out = rayfield_cmd("stop", "--temp-dir", str(tmp_path))  # nothing to stop: not an error
    assert "no rayfield processes were running" in out.stdout
    assert "Traceback" not in out.stderr
