"""sync_to_driver on a real two-node cluster started by the CLI (head with resource
``h``, a second node with ``b``): a trial on the other node has its directory's files
sent to the driver through the cluster, while it runs (after a checkpoint, and every
``sync_period``: only the files new or changed since) and when it ends; a trial on the
driver's node sends nothing; False asks nothing; a function is called with
``<node ip>:<dir>``.

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
def applied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, bool]]:
    """Every (driver logdir, report, final) the driver applies (final: the trial's last
    copy, asked for when its actor was released after it ended)."""
    seen: list[tuple[str, Any, bool]] = []
    real = DriverSync.apply

    def apply(
        self: DriverSync, logdir: str, report: Any, trial_id: str = "", final: bool = True
    ) -> list[str]:
        seen.append((logdir, report, final))
        return real(self, logdir, report, trial_id, final)

    monkeypatch.setattr(DriverSync, "apply", apply)
    return seen


def run_on(node: str, tmp_path: Path, run_or_experiment: Any = None, **kw: Any) -> Any:
    return tune.run(
        run_or_experiment or writes_an_artifact,
        name=f"on-{node}",
        resources_per_trial={"cpu": 1, node: 1},
        local_dir=str(tmp_path),
        verbose=0,
        **kw,
    )


def test_a_trial_on_the_other_node_sends_its_files(two_nodes, tmp_path, applied):
    [trial] = run_on("b", tmp_path).trials
    [(logdir, report, final)] = applied  # once, at its end (the period is 300 s)
    assert final
    assert logdir == trial.logdir and report["node_id"] == two_nodes["b"]
    assert report["files"]["artifact.txt"] == f"written on {two_nodes['b']}\n".encode()
    assert not any(rel.startswith("checkpoint_") for rel in report["files"])
    assert (Path(trial.logdir) / "artifact.txt").read_text().strip().endswith(two_nodes["b"])


def test_a_trial_on_the_drivers_node_sends_nothing(two_nodes, tmp_path, applied):
    run_on("h", tmp_path)
    assert [report for _, report, _ in applied] == [None]


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


class WritesAsItTrains(tune.Trainable):
    """Writes ``artifact.txt`` once and ``step.txt`` (its iteration) every step; ends
    after 1,000 steps unless stopped first."""

    def step(self) -> dict[str, Any]:
        if self.iteration == 0:
            Path("artifact.txt").write_text("written once\n")
        Path("step.txt").write_text(f"{self.iteration + 1}\n")
        return {"score": 1.0, "done": self.iteration + 1 >= 1000}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "state.txt").write_text(str(self.iteration))


def during_run(applied: list[tuple[str, Any, bool]]) -> list[dict[str, Any]]:
    return [report for _, report, final in applied if not final and report is not None]


def test_a_checkpoint_sends_the_files_while_the_trial_runs(two_nodes, tmp_path, applied):
    def arrived(trial_id: str, result: dict[str, Any]) -> bool:
        return any("artifact.txt" in r["files"] for r in during_run(applied))

    [trial] = run_on(
        "b",
        tmp_path,
        run_or_experiment=WritesAsItTrains,
        checkpoint_freq=5,
        stop=arrived,  # the trial ends only once the file reached the driver
        sync_config=tune.SyncConfig(sync_period=3600.0),  # only checkpoints trigger
    ).trials
    assert 5 <= trial.last_result["training_iteration"] < 1000  # stopped by `arrived`
    first = during_run(applied)[0]
    assert first["node_id"] == two_nodes["b"]
    assert first["files"]["artifact.txt"] == b"written once\n"
    assert int(first["files"]["step.txt"]) >= 5  # after the first checkpoint
    assert not any(rel.startswith("checkpoint_") for rel in first["files"])
    assert applied[-1][2]  # the copy at its end came last


def test_copies_every_period_carry_only_changed_files(two_nodes, tmp_path, applied):
    def with_steps() -> list[int]:
        copies = during_run(applied)
        return [int(c["files"]["step.txt"]) for c in copies if "step.txt" in c["files"]]

    run_on(
        "b",
        tmp_path,
        run_or_experiment=WritesAsItTrains,
        stop=lambda trial_id, result: len(with_steps()) >= 3,
        sync_config=tune.SyncConfig(sync_period=0.0, sync_on_checkpoint=False),
    )
    copies = during_run(applied)
    assert sum("artifact.txt" in c["files"] for c in copies) == 1  # sent once, unchanged after
    steps = with_steps()
    assert len(steps) >= 3 and steps == sorted(set(steps))  # each copy a newer version
