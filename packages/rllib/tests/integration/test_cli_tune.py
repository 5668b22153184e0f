"""``rllib train`` through rayfield-tune: several trials, schedulers, search spaces,
checkpoint retention and exports (skipped when rayfield-tune is not installed)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("rayfield.tune")

from rayfield.rllib.scripts import cli

TINY = {
    "num_workers": 0,
    "train_batch_size": 200,
    "rollout_fragment_length": 100,
    "model": {"fcnet_hiddens": [16]},
    "seed": 0,
}


def _train(tmp_path: Path, *extra: str, config: dict[str, Any] | None = None) -> Any:
    args = [
        "train",
        "--run",
        "PG",
        "--env",
        "CartPole-v1",
        "--config",
        json.dumps(config or TINY),
        "--local-dir",
        str(tmp_path),
        *extra,
    ]
    if "--stop" not in extra:
        args += ["--stop", '{"training_iteration": 1}']
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    return res


def _trials(tmp_path: Path) -> list[Path]:
    return sorted(d for d in (tmp_path / "default").iterdir() if d.is_dir())


def _iterations(trial: Path) -> list[int]:
    lines = (trial / "result.json").read_text().splitlines()
    return [json.loads(x)["training_iteration"] for x in lines]


def test_num_samples_runs_each_trial(cluster: Any, tmp_path: Path) -> None:
    res = _train(tmp_path, "--num-samples", "2")
    trials = _trials(tmp_path)
    assert len(trials) == 2
    for trial in trials:
        assert _iterations(trial) == [1]
        assert json.loads((trial / "params.json").read_text())["train_batch_size"] == 200
    assert res.output.count(": TERMINATED, episode_reward_mean") == 2
    assert "tune: 2 trials" in res.output


def test_scheduler_and_its_config(cluster: Any, tmp_path: Path) -> None:
    res = _train(
        tmp_path,
        "--num-samples",
        "2",
        "--scheduler",
        "AsyncHyperBand",
        "--scheduler-config",
        '{"max_t": 2, "grace_period": 1, "reduction_factor": 2}',
        "--stop",
        '{"training_iteration": 2}',
    )
    trials = _trials(tmp_path)
    assert len(trials) == 2
    # ASHA may stop the worse trial at its first rung; the other runs to max_t
    assert sorted(len(_iterations(t)) for t in trials)[-1] == 2
    assert res.output.count(": TERMINATED, episode_reward_mean") == 2


def test_grid_search_config(cluster: Any, tmp_path: Path) -> None:
    _train(tmp_path, config={**TINY, "lr": {"grid_search": [0.01, 0.001]}})
    lrs = sorted(json.loads((t / "params.json").read_text())["lr"] for t in _trials(tmp_path))
    assert lrs == [0.001, 0.01]


def test_keep_one_checkpoint_export_and_rollout(cluster: Any, tmp_path: Path) -> None:
    res = _train(
        tmp_path,
        "--keep-checkpoints-num",
        "1",
        "--checkpoint-freq",
        "1",
        "--export-formats",
        "model,checkpoint",
        "--stop",
        '{"training_iteration": 2}',
    )
    (trial,) = _trials(tmp_path)
    assert _iterations(trial) == [1, 2]
    (kept,) = trial.glob("checkpoint_*")
    assert kept.name == "checkpoint_000002" and (kept / "checkpoint-2").exists()
    assert f"checkpoint {kept / 'checkpoint-2'}" in res.output
    assert (trial / "export" / "model" / "model.pt").exists()
    assert (trial / "export" / "checkpoint" / "model.pt").exists()
    out = CliRunner().invoke(
        cli, ["rollout", str(kept / "checkpoint-2"), "--episodes", "1", "--no-render"]
    )
    assert out.exit_code == 0, out.output
    assert out.output.count("Episode reward") == 1


class MakesMarker:
    """Unpickling this creates the directory ``marker``: proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (self.marker,))


def test_restore_of_a_copied_checkpoint_unpickles_nothing(cluster: Any, tmp_path: Path) -> None:
    _train(tmp_path / "first", "--checkpoint-freq", "1", "--max-failures", "0")
    (trial,) = _trials(tmp_path / "first")
    (ckpt,) = trial.glob("checkpoint_*")
    # someone else's experiment, copied here, with a pickle where Tune keeps its metadata
    copied = tmp_path / "copied"
    shutil.copytree(ckpt, copied)
    marker = tmp_path / "unpickled"
    (copied / ".tune_metadata").write_bytes(pickle.dumps(MakesMarker(marker)))
    res = _train(
        tmp_path / "second",
        "--restore",
        str(copied / "checkpoint-1"),
        "--max-failures",
        "0",
        "--stop",
        '{"training_iteration": 2}',
    )
    (trial,) = _trials(tmp_path / "second")
    assert _iterations(trial) == [2]  # went on from the checkpoint's iteration
    assert ": TERMINATED" in res.output
    assert not marker.exists()


def test_tune_finds_every_algorithm_by_name(tmp_path: Path) -> None:
    from importlib.metadata import entry_points

    from rayfield import tune
    from rayfield.rllib.agents.registry import ALGORITHMS

    # the installed entry points themselves load to Trainable classes (so Tune never skips them)
    found = {ep.name: ep.load() for ep in entry_points(group="rayfield.tune.trainables")}
    assert set(ALGORITHMS) <= set(found)
    for name in ALGORITHMS:
        assert issubclass(found[name], tune.Trainable), name
    analysis = tune.run(
        "PG",
        config={**TINY, "env": "CartPole-v1"},
        stop={"training_iteration": 1},
        local_dir=str(tmp_path),
    )
    (trial,) = analysis.trials
    assert trial.status == "TERMINATED"
    assert trial.last_result["training_iteration"] == 1
    assert trial.last_result["timesteps_total"] >= 200


def test_tune_trials_leave_the_result_files_and_logdir_output(cluster: Any, tmp_path: Path) -> None:
    """Through Tune, each trial directory has params.json, result.json, progress.csv and
    TensorBoard events, a checkpoint at the end (by default) with its evaluate command, and
    ``output: "logdir"`` writes the trial's experience there."""
    res = _train(tmp_path, "--max-failures", "0", config={**TINY, "output": "logdir"})
    (trial,) = _trials(tmp_path)
    names = {p.name for p in trial.iterdir()}
    assert {"params.json", "result.json", "progress.csv"} <= names
    assert any(n.startswith("events.out.tfevents.") for n in names)
    assert any(n.startswith("output-") and n.endswith(".json") for n in names)
    assert "evaluate with: rllib evaluate " in res.output and "--algo PG" in res.output
