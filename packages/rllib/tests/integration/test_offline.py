"""Offline data end to end: algorithms write experience files (JSON and Parquet) and
others train on them with off-policy estimates in their results; BC reproduces an
expert; MARWIL prefers the actions that paid off where BC cannot; the reference's
conversion example (``saving_experiences.py``) writes data BC trains on."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.dqn import DQNTrainer
from rayfield.rllib.agents.marwil import BCTrainer, MARWILTrainer
from rayfield.rllib.agents.pg import PGTrainer
from rayfield.rllib.evaluation.sample_batch_builder import SampleBatchBuilder
from rayfield.rllib.offline import JsonReader, JsonWriter, OfflineDataError

EXPERT_STEPS = 10


class SignEnv(gym.Env):
    """10 steps of random 2-d observations; reward 1 for action ``obs[0] > 0``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: Any = None) -> None:
        self.rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        self.obs = self.rng.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, {}

    def step(self, action: int) -> Any:
        reward = float(action == int(self.obs[0] > 0))
        self.t += 1
        self.obs = self.rng.uniform(-1, 1, 2).astype(np.float32)
        return self.obs, reward, self.t >= EXPERT_STEPS, False, {}


def write_sign_data(out: Path, expert: bool, episodes: int = 200) -> None:
    """Episodes of SignEnv by the expert (always right) or a uniform random policy."""
    rng = np.random.default_rng(1)
    builder, writer = SampleBatchBuilder(), JsonWriter(out)
    for eps in range(episodes):
        obs = rng.uniform(-1, 1, 2).astype(np.float32)
        for t in range(EXPERT_STEPS):
            right = int(obs[0] > 0)
            action = right if expert else int(rng.integers(2))
            new_obs = rng.uniform(-1, 1, 2).astype(np.float32)
            builder.add_values(
                t=t,
                eps_id=eps,
                obs=obs,
                actions=action,
                action_prob=1.0 if expert else 0.5,
                rewards=float(action == right),
                dones=t == EXPERT_STEPS - 1,
                new_obs=new_obs,
            )
            obs = new_obs
        if eps % 20 == 19:
            writer.write(builder.build_and_reset())
    writer.close()


def greedy_accuracy(trainer: Any) -> tuple[float, float]:
    """(share of right greedy actions, mean probability of the right action) on fresh
    observations."""
    obs = np.random.default_rng(5).uniform(-1, 1, (400, 2)).astype(np.float32)
    right = (obs[:, 0] > 0).astype(np.int64)
    acts = trainer.compute_actions(dict(enumerate(obs)), explore=False)
    logp = trainer.get_policy().compute_log_likelihoods(right, obs)
    return float(np.mean([acts[i] == right[i] for i in range(len(obs))])), float(
        np.exp(logp).mean()
    )


def train(cls: type, data: Path, iterations: int, **config: Any) -> Any:
    trainer = cls(
        env=SignEnv,
        config={
            "input": str(data),
            "lr": 0.01,
            "train_batch_size": 400,
            "model": {"fcnet_hiddens": [16]},
            "seed": 0,
            **config,
        },
    )
    for _ in range(iterations):
        result = trainer.train()
    return trainer, result


def test_bc_reproduces_the_expert(tmp_path: Path) -> None:
    write_sign_data(tmp_path / "expert", expert=True)
    trainer, result = train(BCTrainer, tmp_path / "expert", 15)
    try:
        accuracy, _ = greedy_accuracy(trainer)
        assert accuracy >= 0.95, accuracy
        # read from files: no simulated episodes, but the estimators report
        assert math.isnan(result["episode_reward_mean"])
        assert set(result["off_policy_estimator"]) == {"is", "wis"}
        assert result["off_policy_estimator"]["is"]["V_prev"] > 0
    finally:
        trainer.stop()


def test_marwil_weights_actions_by_advantage_where_bc_cannot(tmp_path: Path) -> None:
    write_sign_data(tmp_path / "random", expert=False)
    common = {"gamma": 0.0, "input_evaluation": []}
    bc, _ = train(BCTrainer, tmp_path / "random", 15, **common)
    marwil, result = train(
        MARWILTrainer,
        tmp_path / "random",
        50,
        beta=2.0,
        moving_average_sqd_adv_norm_start=0.25,
        moving_average_sqd_adv_norm_update_rate=1e-3,
        **common,
    )
    try:
        _, bc_prob = greedy_accuracy(bc)
        accuracy, marwil_prob = greedy_accuracy(marwil)
        assert 0.4 < bc_prob < 0.6  # cloning a uniform policy
        assert marwil_prob > 0.7 and accuracy > 0.9, (marwil_prob, accuracy)
        assert result["info"]["learner"]["default_policy"]["vf_loss"] < 0.3
    finally:
        bc.stop()
        marwil.stop()


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_files_written_by_pg_train_dqn_with_estimates(tmp_path: Path, fmt: str) -> None:
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / "pg-out"
    pg = PGTrainer(
        env="CartPole-v1",
        config={
            "output": str(out),
            "output_config": {"format": fmt},
            "model": {"fcnet_hiddens": [16]},
            "seed": 0,
        },
    )
    pg.train()
    pg.stop()  # closes the writer (Parquet files are written then)
    files = sorted(out.iterdir())
    assert files and all(f.suffix == f".{fmt}" for f in files)
    dqn = DQNTrainer(
        env="CartPole-v1",
        config={
            "input": str(out),
            "learning_starts": 100,
            "timesteps_per_iteration": 200,
            "min_iter_time_s": 0,
            "exploration_final_eps": 0.05,
            "model": {"fcnet_hiddens": [16]},
            "hiddens": [16],
            "seed": 0,
        },
    )
    try:
        result = dqn.train()
        assert result["timesteps_total"] >= 200
        assert result["info"]["learner"]["default_policy"]["mean_q"] != 0
        for name, key in (("is", "V_step_IS"), ("wis", "V_step_WIS")):
            est = result["off_policy_estimator"][name]
            assert est["V_prev"] > 1 and math.isfinite(est[key]) and "V_gain_est" in est
    finally:
        dqn.stop()


def test_logdir_output_and_mixed_input(tmp_path: Path) -> None:
    class Logger:
        logdir = str(tmp_path / "trial")

    Path(Logger.logdir).mkdir(mode=0o700)
    pg = PGTrainer(
        env="CartPole-v1",
        config={"output": "logdir", "output_compress_columns": [], "seed": 0},
        logger_creator=lambda config: Logger(),
    )
    pg.train()
    pg.stop()
    written = list(Path(Logger.logdir).glob("output-*.json"))
    assert written and '"obs": [[' in written[0].read_text()  # plain lists, readable
    mixed = PGTrainer(
        env="CartPole-v1",
        config={"input": {"sampler": 0.5, Logger.logdir: 0.5}, "train_batch_size": 1000, "seed": 0},
    )
    try:
        result = mixed.train()
        assert result["episodes_this_iter"] > 0  # from the sampler part
        assert result["off_policy_estimator"]["is"]["V_prev"] > 0  # from the files
    finally:
        mixed.stop()


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a file, a directory or a glob"):
        BCTrainer(env="CartPole-v1", config={"input": str(tmp_path / "nothing")})
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "SampleBatch", "obs": [[1, 2]], "actions": [0, 1]}\n')
    trainer = BCTrainer(env="CartPole-v1", config={"input": str(bad), "input_evaluation": []})
    try:
        with pytest.raises(OfflineDataError, match=rf"{bad}:1: columns have different numbers"):
            trainer.train()
    finally:
        trainer.stop()
    with pytest.raises(ValueError, match="unknown off-policy estimator"):
        BCTrainer(env="CartPole-v1", config={"off_policy_estimation_methods": ["dr"]})


def test_saving_experiences_example_writes_data_bc_trains_on(tmp_path: Path) -> None:
    from test_examples import load  # type: ignore[import-not-found]

    path = load("saving_experiences").main(str(tmp_path / "demo-out"), 5)
    trainer = BCTrainer(
        env="CartPole-v1", config={"input": path, "train_batch_size": 50, "seed": 0}
    )
    try:
        result = trainer.train()
        assert result["info"]["num_steps_trained"] >= 50
        assert result["off_policy_estimator"]["wis"]["V_prev"] > 0
    finally:
        trainer.stop()


SMALL = {
    "model": {"fcnet_hiddens": [8]},
    "seed": 0,
    "rollout_fragment_length": 32,
    "num_workers": 0,
}
WRITERS = {
    "PG": {"train_batch_size": 64},
    "PPO": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 1},
    "DQN": {"hiddens": [8], "learning_starts": 32, "timesteps_per_iteration": 64},
}
READERS = {
    **{run: {**cfg, "postprocess_inputs": True} for run, cfg in WRITERS.items() if run != "DQN"},
    "A2C": {"train_batch_size": 64, "postprocess_inputs": True},
    "DQN": {**WRITERS["DQN"], "exploration_final_eps": 0.1},
    "MARWIL": {"train_batch_size": 64},
    "BC": {"train_batch_size": 64},
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_any_algorithm_trains_on_any_algorithms_files(tmp_path: Path, writer: str) -> None:
    from rayfield.rllib.agents.registry import get_trainer_class

    out = tmp_path / writer
    config = {**SMALL, **WRITERS[writer], "output": str(out), "min_iter_time_s": 0}
    trainer = get_trainer_class(writer)(env="CartPole-v1", config=config)
    trainer.train()
    trainer.stop()
    for reader, extra in READERS.items():
        config = {**SMALL, **extra, "input": str(out), "min_iter_time_s": 0}
        trainer = get_trainer_class(reader)(env="CartPole-v1", config=config)
        try:
            result = trainer.train()
            assert result["info"]["num_steps_trained"] > 0, (writer, reader)
            assert "V_step_WIS" in result["off_policy_estimator"]["wis"], (writer, reader)
        finally:
            trainer.stop()


def test_remote_workers_write_their_own_files(cluster: Any, tmp_path: Path) -> None:
    """A remote worker writes ``..._worker-1_...`` files; its Parquet writer is closed
    (its file written) when the trainer stops."""
    pytest.importorskip("pyarrow")
    out = tmp_path / "remote-out"
    pg = PGTrainer(
        env="CartPole-v1",
        config={
            **SMALL,
            "num_workers": 1,
            "train_batch_size": 64,
            "output": str(out),
            "output_config": {"format": "parquet"},
        },
    )
    pg.train()
    pg.stop()
    files = sorted(p.name for p in out.iterdir())
    assert files and all("_worker-1_" in f and f.endswith(".parquet") for f in files)
    batches = list(JsonReader(str(out)).read_all_files())
    assert sum(b.count for b in batches) >= 64
