"""The rllib command: train to a stop rule with checkpoints, then roll out."""

from __future__ import annotations

import json
import pickle
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from rayfield.rllib import tune_runner
from rayfield.rllib.scripts import cli, should_stop

CONFIG = json.dumps(
    {
        "num_workers": 0,
        "train_batch_size": 200,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 2,
        "rollout_fragment_length": 100,
        "model": {"fcnet_hiddens": [16]},
        "seed": 0,
    }
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_train_then_rollout(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "train",
            "--run",
            "PPO",
            "--env",
            "CartPole-v1",
            "--config",
            CONFIG,
            "--stop",
            '{"training_iteration": 3}',
            "--checkpoint-freq",
            "2",
            "--checkpoint-at-end",
            "--local-dir",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    (trial,) = (tmp_path / "default").iterdir()
    assert (trial / "checkpoint_2" / "checkpoint-2").exists()
    ckpt = trial / "checkpoint_3" / "checkpoint-3"
    assert ckpt.exists()
    lines = (trial / "result.json").read_text().splitlines()
    assert [json.loads(x)["training_iteration"] for x in lines] == [1, 2, 3]
    assert json.loads((trial / "params.json").read_text())["train_batch_size"] == 200
    assert f"checkpoint: {ckpt}" in res.output
    # what rllib train keeps is this user's alone: directories 0700, files 0600
    assert _mode(tmp_path / "default") == _mode(trial) == _mode(ckpt.parent) == 0o700
    for name in ("params.json", "result.json"):
        assert _mode(trial / name) == 0o600
    assert {_mode(p) for p in ckpt.parent.iterdir()} == {0o600}

    out = tmp_path / "episodes.pkl"
    res = runner.invoke(
        cli,
        [
            "rollout",
            str(ckpt),
            "--run",
            "PPO",
            "--env",
            "CartPole-v1",
            "--episodes",
            "2",
            "--steps",
            "100000",
            "--no-render",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.output.count("Episode reward") == 2
    assert _mode(out) == 0o600
    episodes = pickle.loads(out.read_bytes())  # written by this test's rollout just above
    assert len(episodes) == 2
    obs, action, _next_obs, reward, done = episodes[0][-1]
    assert len(obs) == 4 and action in (0, 1) and reward == 1.0 and done is True


def test_train_errors_are_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        cli, ["train", "--run", "PPX", "--env", "CartPole-v1", "--local-dir", str(tmp_path)]
    )
    assert res.exit_code == 2 and "did you mean 'PPO'" in res.output
    res = runner.invoke(
        cli,
        [
            "train",
            "--run",
            "PPO",
            "--env",
            "CartPole-v1",
            "--config",
            '{"num_worker": 0}',
            "--local-dir",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 2 and "did you mean 'num_workers'" in res.output
    res = runner.invoke(cli, ["train", "--env", "CartPole-v1"])
    assert res.exit_code == 2 and "--run" in res.output
    res = runner.invoke(cli, ["rollout", str(tmp_path)])
    assert res.exit_code == 2 and "not a rayfield-rllib checkpoint" in res.output


def test_stop_rule() -> None:
    assert should_stop({"episode_reward_mean": 451.0}, {"episode_reward_mean": 450})
    assert not should_stop({"episode_reward_mean": float("nan")}, {"episode_reward_mean": 450})
    assert should_stop(
        {"env_runners": {"episode_return_mean": 200}}, {"env_runners/episode_return_mean": 150}
    )
    import click

    with pytest.raises(click.UsageError):
        should_stop({"a": 1}, {"b": 1})


# Flags (and a config) that only Tune runs: without rayfield-tune each is a usage error that
# says how to install it, raised before anything is trained or written.
TUNE_ONLY = [
    ["--num-samples", "2"],
    ["--resources-per-trial", '{"cpu": 1}'],
    ["--upload-dir", "file:///tmp/rllib-upload"],
    ["--keep-checkpoints-num", "1"],
    ["--checkpoint-score-attr", "min-episode_reward_mean"],
    ["--max-failures", "0"],
    ["--scheduler", "AsyncHyperBand"],
    ["--scheduler-config", '{"max_t": 2}'],
    ["--resume"],
    ["--queue-trials"],
    ["--export-formats", "model"],
    ["--config", '{"lr": {"grid_search": [0.01, 0.001]}}'],
]


@pytest.mark.parametrize("flag", TUNE_ONLY, ids=lambda f: f[0])
def test_tune_only_flags_without_tune_are_usage_errors(
    flag: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tune_runner, "import_tune", lambda: None)
    args = ["train", "--run", "PG", "--env", "CartPole-v1", "--local-dir", str(tmp_path)]
    res = CliRunner().invoke(cli, [*args, *flag])
    assert res.exit_code == 2, res.output
    assert "pip install 'rayfield-rllib[tune]'" in res.output
    assert (flag[0] if flag[0] != "--config" else "grid_search") in res.output
    assert not any(tmp_path.iterdir())


def test_yaml_with_tune_keys_without_tune_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tune_runner, "import_tune", lambda: None)
    spec = tmp_path / "exp.yaml"
    spec.write_text("cartpole:\n  run: PG\n  env: CartPole-v1\n  max_failures: 1\n")
    res = CliRunner().invoke(cli, ["train", "-f", str(spec), "--local-dir", str(tmp_path)])
    assert res.exit_code == 2 and "'max_failures' (experiment 'cartpole')" in res.output
    assert "pip install 'rayfield-rllib[tune]'" in res.output


def test_bad_export_format_is_a_usage_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["train", "--run", "PG", "--env", "CartPole-v1", "--export-formats", "onnx"]
    )
    assert res.exit_code == 2 and "unknown format 'onnx'" in res.output
