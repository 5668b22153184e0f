"""sync_to_driver on a real two-node cluster started by the CLI (head with resource
``h``, a second node with ``b``): a trial on the other node has its directory's files
sent to the driver through the cluster; a trial on the driver's node sends nothing;
False asks nothing; a function is called with ``<node ip>:<dir>``.

Both nodes run on this machine and share its file system, so the copy finds the files
already in place; the test watches what travelled (the reports the driver applied)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rayfield
from rayfield import tune
from rayfield.testing import wait_for
from rayfield.tune.driver_sync import DriverSync

CLI = [sys.executable, "-m", "rayfield.cli.main"]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    temp_dir = tmp_path_factory.mktemp("rf")
    common = ["--num-cpus", "1", "--temp-dir", str(temp_dir)]
    run = dict(check=True, capture_output=True, timeout=120)
    subprocess.run(
        [*CLI, "start", "--head", "--port", "0", "--resources", '{"h": 1}', *common], **run
    )
    try:
        address = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())[
            "gcs_address"
        ]
        subprocess.run(
            [*CLI, "start", "--address", address, "--resources", '{"b": 1}', *common], **run
        )
        rayfield.init(address=address, temp_dir=str(temp_dir))
        try:
            wait_for(lambda: len([n for n in rayfield.nodes() if n["Alive"]]) == 2, 30)
            nodes = {
                "b" if "b" in n["Resources"] else "h": n["NodeID"]
                for n in rayfield.nodes()
                if n["Alive"]
            }
            assert rayfield.get_runtime_context().get_node_id() == nodes["h"]
            yield nodes
        finally:
            rayfield.shutdown()
    finally:
        subprocess.run(
            [*CLI, "stop", "--temp-dir", str(temp_dir)], capture_output=True, timeout=120
        )


def writes_an_artifact(config: dict[str, Any]) -> None:
    node = rayfield.get_runtime_context().get_node_id()
    Path("artifact.txt").write_text(f"written on {node}\n")  # the trial dir is the cwd
    tune.report(score=1.0)


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Every (driver logdir, report) the driver applies."""
    seen: list[tuple[str, Any]] = []
    real = DriverSync.apply

    def apply(self: DriverSync, logdir: str, report: Any) -> list[str]:
        seen.append((logdir, report))
        return real(self, logdir, report)

    monkeypatch.setattr(DriverSync, "apply", apply)
    return seen


def run_on(node: str, tmp_path: Path, **kw: Any) -> Any:
    return tune.run(
        writes_an_artifact,
        name=f"on-{node}",
        resources_per_trial={"cpu": 1, node: 1},
        local_dir=str(tmp_path),
        verbose=0,
        **kw,
    )


def test_a_trial_on_the_other_node_sends_its_files(two_nodes, tmp_path, applied):
    [trial] = run_on("b", tmp_path).trials
    [(logdir, report)] = applied
    assert logdir == trial.logdir and report["node_id"] == two_nodes["b"]
    assert report["files"]["artifact.txt"] == f"written on {two_nodes['b']}\n".encode()
    assert not any(rel.startswith("checkpoint_") for rel in report["files"])
    assert (Path(trial.logdir) / "artifact.txt").read_text().strip().endswith(two_nodes["b"])


def test_a_trial_on_the_drivers_node_sends_nothing(two_nodes, tmp_path, applied):
    run_on("h", tmp_path)
    assert [report for _, report in applied] == [None]


def test_false_asks_nothing(two_nodes, tmp_path, applied):
    run_on("b", tmp_path, sync_to_driver=False)
    assert applied == []


def test_a_function_gets_the_remote_source(two_nodes, tmp_path):
    calls: list[tuple[str, str]] = []
    [trial] = run_on("b", tmp_path, sync_to_driver=lambda s, t: calls.append((s, t))).trials
    [(source, target)] = calls
    host, _, remote_dir = source.partition(":")
    assert host == trial.last_result["node_ip"] and remote_dir == trial.logdir
    assert target == trial.logdir and os.path.isdir(target)
