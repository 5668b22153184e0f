"""Drivers connecting to a node that runs in its own process (init(address=...))."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import rayfield as rf


@pytest.fixture
def node_process(tmp_path: Path) -> Iterator[Path]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rayfield._private.node_manager.node_main",
            "--num-cpus",
            "2",
            "--resources",
            '{"tpu": 1}',
            "--object-store-memory",
            str(128 << 20),
            "--temp-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "rayfield node started" in line, line
        yield tmp_path
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    session = (tmp_path / "session_latest").resolve()
    assert not (session / "node.json").exists()
    assert not list((session / "sockets").glob("*")) if (session / "sockets").exists() else True


def test_drivers_share_a_running_node(node_process: Path) -> None:
    info = rf.init(address="auto", temp_dir=str(node_process))
    try:
        assert info["connected"]
        assert rf.cluster_resources() == {"CPU": 2.0, "tpu": 1.0}
        [node] = rf.nodes()
        assert node["Alive"]
        assert node["idle_duration_s"] is None  # a node outside a cluster reports to no one

        @rf.remote
        class Board:
            def __init__(self) -> None:
                self.notes: list[str] = []

            def add(self, note: str) -> int:
                self.notes.append(note)
                return len(self.notes)

        board = Board.options(name="board").remote()
        assert rf.get(board.add.remote("first driver")) == 1
        other = textwrap.dedent(f"""
            import rayfield as rf
            rf.init(address="auto", temp_dir={str(node_process)!r})
            print(rf.get(rf.get_actor("board").add.remote("second driver")))
            rf.shutdown()
        """)
        out = subprocess.run(
            [sys.executable, "-c", other], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "2"

        @rf.remote(resources={"tpu": 1})
        def on_tpu() -> int:
            return os.getpid()

        assert rf.get(on_tpu.remote(), timeout=30) != os.getpid()
    finally:
        rf.shutdown()
    # The node outlives its drivers.
    node = json.loads(((node_process / "session_latest") / "node.json").read_text())
    assert os.path.exists(node["socket"])


def test_connecting_without_a_node_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match="no running rayfield node"):
        rf.init(address="auto", temp_dir=str(tmp_path))
    assert not rf.is_initialized()
    with pytest.raises(ValueError, match="must not be given"):
        rf.init(address="auto", num_cpus=2)
