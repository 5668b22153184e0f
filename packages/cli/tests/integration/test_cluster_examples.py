"""The example applications on a two-node cluster started by the CLI, end to end.

What ``nox -s demo`` does, for two examples: ``rayfield start --head`` and a second node
(one CPU each), then ``run_all.py --address`` in a process of its own whose path does not
hold the examples (their code reaches the nodes' workers by value), then ``rayfield stop``.
Each example starts two one-CPU actors, so the second can only run on the other node:
placement of waiting work on a node with free resources, calls and results between nodes
and arguments whose owner dropped its refs at once (lbfgs) all take part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterutil import rayfield_cmd, start_nodes, stop_in_background

EXAMPLES = Path(__file__).resolve().parents[3] / "core" / "examples"


@pytest.fixture()
def two_nodes(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    temp_dir = tmp_path / "rf"
    temp_dir.mkdir()
    # Started away from the examples: the nodes' workers cannot import them by name.
    address = start_nodes(temp_dir, resources="{}", cwd=str(tmp_path))
    try:
        yield address, temp_dir
    finally:
        stop_in_background(temp_dir)


def node_sessions(temp_dir: Path) -> list[Path]:
    """The session directories of the running nodes (not the session_latest link)."""
    return [p.parent for p in temp_dir.glob("session_*/node.json") if not p.parent.is_symlink()]


def worker_pids_by_node(temp_dir: Path) -> dict[str, set[str]]:
    """Session directory -> pids of the processes that recorded task events there."""
    out = {}
    for session in node_sessions(temp_dir):
        logs = session / "logs"
        out[session.name] = {
            p.stem.split("-", 1)[1] for p in logs.glob("events-*.jsonl") if p.stat().st_size
        }
    return out


def test_examples_run_on_two_nodes(two_nodes: tuple[str, Path], tmp_path: Path) -> None:
    address, temp_dir = two_nodes
    sessions = {p.name for p in node_sessions(temp_dir)}
    assert len(sessions) == 2
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if "examples" not in p))
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "run_all.py"),
            "parameter_server_sync",
            "lbfgs",
            "--address",
            address,
            "--temp-dir",
            str(temp_dir),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(tmp_path),
        env=env,
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    summary = proc.stdout.split("==== summary")[1]
    assert "ok   parameter_server_sync" in summary and "ok   lbfgs" in summary
    # Both nodes ran tasks: the second actor of each example went to the other node.
    ran = worker_pids_by_node(temp_dir)
    assert set(ran) == sessions and all(ran.values()), ran
    status = json.loads(
        rayfield_cmd(
            "status", "--address", address, "--temp-dir", str(temp_dir), "--format", "json"
        ).stdout
    )
    assert len([n for n in status if n["alive"]]) == 2
