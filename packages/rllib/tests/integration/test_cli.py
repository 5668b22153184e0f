"""The rllib command: train to a stop rule with checkpoints, then roll out."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

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
    episodes = pickle.loads(out.read_bytes())
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
