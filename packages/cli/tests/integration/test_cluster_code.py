"""Exported code lives in the GCS: a task still runs after the node that exported its
function died."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from clusterutil import add_node, start_nodes, stop_in_background

import rayfield as rf
import rayfield.util.state
from rayfield._private.common.code import NAMESPACE, is_code
from rayfield._private.gcs.client import GcsClient
from rayfield.testing import wait_for
from rayfield.util.cluster import find_token


@rf.remote(resources={"c": 1}, num_cpus=0)
def hold_c(started: str, go: str) -> None:
    """Keeps node C's only "c" busy (from when it creates ``started``) until the file
    ``go`` exists."""
    Path(started).touch()
    while not Path(go).exists():
        time.sleep(0.05)


@rf.remote(resources={"b": 1}, num_cpus=0)
def export_on_b(out: str) -> str:
    """Runs on node B: defines a new function there and sends a call of it to node C."""

    @rf.remote(resources={"c": 1}, num_cpus=0)
    def write_on_c(path: str, text: str) -> None:
        Path(path).write_text(text)

    write_on_c.remote(out, "made with code exported on node B")
    return "submitted"


def node_row(resource: str, alive: bool = True) -> dict[str, Any]:
    """The row of ``rayfield.util.state.list_nodes()`` of the node with ``resource`` (the
    live one; with ``alive=False`` also a dead one)."""
    rows = rayfield.util.state.list_nodes()
    [row] = [r for r in rows if resource in r["resources_total"] and (r["alive"] or not alive)]
    return row


def test_code_exported_on_a_dead_node_comes_from_the_gcs(tmp_path: Path) -> None:
    address = start_nodes(tmp_path, "--heartbeat-timeout-s", "1.5", resources='{"b": 1}')
    add_node(address, tmp_path, '{"c": 1}', "--heartbeat-timeout-s", "1.5")
    go, out = tmp_path / "go", tmp_path / "out.txt"
    rf.init(address=address, temp_dir=str(tmp_path))
    try:
        with GcsClient(address, find_token(address, tmp_path)) as gcs:
            nodes = wait_for(
                lambda: len(gcs.get_nodes()) == 3 and gcs.get_nodes(), 20, "3 nodes", interval=0.2
            )
            [b_session] = [n.session_dir for n in nodes if "b" in n.resources_total]
            started = tmp_path / "started"
            blocker = hold_c.remote(str(started), str(go))
            # "c" is busy before write_on_c is sent, so write_on_c waits on node C
            wait_for(started.exists, 30, "hold_c running on node C", interval=0.2)
            before = set(gcs.kv_keys(NAMESPACE))
            assert rf.get(export_on_b.remote(str(out))) == "submitted"
            new = set(gcs.kv_keys(NAMESPACE)) - before
            assert new and all(is_code(k) for k in new)  # export_on_b, write_on_c
        wait_for(
            lambda: node_row("c")["tasks_queued"] == 1,
            20,
            "write_on_c queued on node C",
            interval=0.2,
        )
        node_b = psutil.Process(json.loads((Path(b_session) / "node.json").read_text())["pid"])
        for p in [node_b, *node_b.children(recursive=True)]:
            p.send_signal(signal.SIGKILL)
        # node B is declared dead; its store (and the code in it) is gone
        wait_for(
            lambda: not node_row("b", alive=False)["alive"],
            20,
            "node B declared dead",
            interval=0.2,
        )
        go.touch()
        rf.get(blocker, timeout=30)
        text = wait_for(
            lambda: out.exists() and out.read_text(), 30, "write_on_c on node C", interval=0.2
        )
        assert text == "made with code exported on node B"
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)


DRIVER = """
import sys
import rayfield as rf
import shapes  # next to this script, not installed

@rf.remote(resources={"x": 1})
def area_on_another_node(square):
    import shapes  # the worker finds it through the driver's search path
    return shapes.area(square), type(square).__module__

rf.init(address=sys.argv[1], temp_dir=sys.argv[2])
print(rf.get(area_on_another_node.remote(shapes.Square(3))))
rf.shutdown()
"""


def test_modules_next_to_the_driver_script_import_on_other_nodes(tmp_path: Path) -> None:
    address = start_nodes(tmp_path / "cluster")  # started from another folder
    project = tmp_path / "project"
    project.mkdir()
    (project / "shapes.py").write_text(
        "class Square:\n    def __init__(self, side):\n        self.side = side\n\n"
        "def area(s):\n    return s.side ** 2\n"
    )
    (project / "main.py").write_text(DRIVER)
    try:
        out = subprocess.run(
            [sys.executable, "main.py", address, str(tmp_path / "cluster")],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "(9, 'shapes')"
    finally:
        stop_in_background(tmp_path / "cluster")
