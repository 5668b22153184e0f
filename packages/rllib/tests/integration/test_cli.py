"""The rllib command: train to a stop rule with checkpoints, then roll out."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
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
    assert f"rllib evaluate {ckpt} --algo PPO --env CartPole-v1" in res.output
    # the files RLlib users look for: params, results, progress.csv, TensorBoard events
    rows = (trial / "progress.csv").read_text().splitlines()
    assert rows[0].split(",").count("training_iteration") == 1 and len(rows) == 4
    (events,) = trial.glob("events.out.tfevents.*")
    assert b"ray/tune/episode_reward_mean" in events.read_bytes()
    # what rllib train keeps is this user's alone: directories 0700, files 0600
    assert _mode(tmp_path / "default") == _mode(trial) == _mode(ckpt.parent) == 0o700
    for name in ("params.json", "result.json", "progress.csv", events.name):
        assert _mode(trial / name) == 0o600
    assert {_mode(p) for p in ckpt.parent.iterdir()} == {0o600}

    out = tmp_path / "episodes.json"
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
    # offline data: one SampleBatch line per episode
    from rayfield.rllib.offline import JsonReader

    episodes = list(JsonReader(str(out)).read_all_files())
    assert len(episodes) == 2
    last = episodes[0]
    assert last["obs"].shape[1] == 4 and set(last["actions"]) <= {0, 1}
    assert last["rewards"][-1] == 1.0 and last["dones"][-1] and not last["dones"][:-1].any()
    assert (last["action_prob"] == 1.0).all()  # greedy
    res = runner.invoke(cli, ["evaluate", str(ckpt), "--out", str(tmp_path / "e.pkl")])
    assert res.exit_code == 2 and "never a pickle" in res.output


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


def _rllib(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``rllib ARGS`` in a fresh process whose home is under ``cwd`` (trainers without a
    ``--local-dir`` make their logdir in ``~/ray_results``: not the user's)."""
    home = cwd / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "rayfield.rllib.scripts", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "HOME": str(home)},
    )


def test_cli_writes_offline_data_that_bc_trains_on(tmp_path: Path) -> None:
    """As a user would: train DQN with --algo (a checkpoint at the end by default), run
    the printed evaluate command writing episodes with --out, train BC on them."""
    small = '{"model": {"fcnet_hiddens": [16]}, "hiddens": [16], "learning_starts": 100, '
    small += '"timesteps_per_iteration": 100, "min_iter_time_s": 0, "seed": 0, "output": "logdir"}'
    res = _rllib(
        "train", "--algo", "DQN", "--env", "CartPole-v1", "--config", small,
        "--stop", '{"training_iteration": 2}', "--local-dir", str(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("evaluate with: "))
    command = line.removeprefix("evaluate with: rllib ").split()
    assert command[0] == "evaluate" and command[2:] == ["--algo", "DQN", "--env", "CartPole-v1"]
    (trial,) = (tmp_path / "default").iterdir()
    names = {p.name for p in trial.iterdir()}
    assert {"params.json", "result.json", "progress.csv"} <= names
    assert any(n.startswith("output-") for n in names)  # output: "logdir" is the trial dir
    data = tmp_path / "episodes"
    res = _rllib(*command, "--episodes", "3", "--explore", "--out", str(data), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("Episode reward") == 3
    res = _rllib(
        "train", "--run", "BC", "--env", "CartPole-v1", "--config",
        json.dumps({"input": str(data), "train_batch_size": 20}),
        "--stop", '{"training_iteration": 2}', "--local-dir", str(tmp_path / "bc"), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    results = [json.loads(x) for x in next((tmp_path / "bc" / "default").iterdir()).joinpath(
        "result.json").read_text().splitlines()]  # fmt: skip
    assert results[-1]["info"]["num_steps_trained"] >= 40
    assert results[-1]["off_policy_estimator"]["is"]["V_prev"] > 0


def test_evaluate_renders_each_step(tmp_path: Path) -> None:
    import gymnasium as gym

    from rayfield.rllib.agents.pg import PGTrainer
    from rayfield.rllib.env.registry import register_env

    frames: list[int] = []

    class Rendered(gym.Wrapper):  # type: ignore[type-arg]
        def render(self) -> None:
            frames.append(1)

    register_env("rendered-cartpole", lambda ctx: Rendered(gym.make("CartPole-v1")))
    trainer = PGTrainer(env="rendered-cartpole", config={"model": {"fcnet_hiddens": [8]}})
    ckpt = trainer.save(str(tmp_path))
    trainer.stop()
    args = ["evaluate", ckpt, "--run", "PG", "--episodes", "1", "--steps", "20"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert not frames  # no --render
    res = CliRunner().invoke(cli, [*args, "--render"])
    assert res.exit_code == 0, res.output
    steps = int(res.output.split(" env steps")[0].rsplit(" ", 1)[1])
    assert len(frames) == steps + 1  # the reset and every step


def test_evaluate_makes_no_log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint trained with ``output: "logdir"``: evaluating it writes only --out, and
    nothing under the home directory (no ~/ray_results experiment)."""
    from rayfield.rllib.agents.pg import PGTrainer
    from rayfield.rllib.result_files import LogDir

    config = {"model": {"fcnet_hiddens": [8]}, "output": "logdir"}
    train_dir = tmp_path / "trial"
    train_dir.mkdir(mode=0o700)
    trainer = PGTrainer(
        env="CartPole-v1", config=config, logger_creator=lambda _: LogDir(str(train_dir))
    )
    ckpt = trainer.save(str(tmp_path / "ckpt"))
    trainer.stop()
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    out = tmp_path / "episodes.json"
    args = ["evaluate", ckpt, "--episodes", "1", "--steps", "20", "--out", str(out)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert out.exists()
    assert list(home.iterdir()) == []
