"""QMIX and VDN learning the two-step game of the QMIX paper (``grouped_twostep``).

* Online, with epsilon annealed to 0 (the reference's example), QMIX and VDN both find
  the optimal return 8: once epsilon is small the data in state 2B is mostly the joint
  action (1, 1), which even VDN's additive Q_tot fits.
* With uniform exploration (epsilon 1 throughout, the paper's experiment), the greedy
  policy of QMIX takes 2B and (1, 1) for 8, while VDN's additive Q_tot cannot fit the
  2B payoffs [[0, 1], [1, 8]] (its best joint action there is worth about 6.5 < 7) and
  takes 2A for 7, as in the paper's Table 1.
* Independent Q-learners (``mixer: None``) settle on 2A, 7, in the online setting too.

The ``slow`` test runs the tuned examples until their stated return.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rayfield.rllib.agents.qmix import QMixTrainer
from rayfield.rllib.env.twostep_game import grouped_twostep

TUNED = Path(__file__).resolve().parents[2] / "tuned_examples"

FAST = {
    "num_workers": 0,
    "rollout_fragment_length": 4,
    "train_batch_size": 32,
    "exploration_fraction": 0.1,
    "schedule_max_timesteps": 10000,
    "exploration_final_eps": 0.0,
    "learning_starts": 200,
    "target_network_update_freq": 200,
    "timesteps_per_iteration": 500,
    "min_iter_time_s": 0,
    "seed": 0,
}


def greedy_return(trainer: QMixTrainer) -> float:
    """The return of one episode of the greedy joint policy (the GRU state carried)."""
    policy = trainer.get_policy()
    prep = trainer.workers.local_worker().preprocessors["default_policy"]
    env = grouped_twostep({})
    obs, _ = env.reset()
    state = policy.get_initial_state()
    total, done = 0.0, False
    while not done:
        flat = prep.transform(obs["group_1"])[None]
        actions, state_out, _ = policy.compute_actions(
            flat, [s[None] for s in state], explore=False
        )
        state = [s[0] for s in state_out]
        obs, rew, terms, _, _ = env.step({"group_1": actions[0]})
        total += rew["group_1"]
        done = terms["__all__"]
    return total


def train(config: dict[str, Any], steps: int, mean: float | None = None) -> QMixTrainer:
    """A trainer trained for `steps` env steps, or until the mean return of the last 100
    episodes reaches `mean`."""
    trainer = QMixTrainer(env="grouped_twostep", config=config)
    while True:
        result = trainer.train()
        if result["timesteps_total"] >= steps:
            return trainer
        if mean is not None and result["episode_reward_mean"] >= mean:
            return trainer


@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
def test_qmix_and_vdn_find_the_optimal_return_online(mixer: str) -> None:
    trainer = train({**FAST, "mixer": mixer}, steps=5000, mean=8.0)
    try:
        result = trainer.train()  # the last 100 episodes (epsilon 0 by now) all got 8
        assert result["episode_reward_mean"] == pytest.approx(8.0), result["timesteps_total"]
        assert greedy_return(trainer) == 8.0
    finally:
        trainer.stop()


@pytest.mark.parametrize(("mixer", "paper"), [("qmix", 8.0), ("vdn", 7.0)])
def test_with_uniform_exploration_the_greedy_returns_are_the_papers(
    mixer: str, paper: float
) -> None:
    # Seen with seeds 0-2: QMIX's greedy return is 8 from 2,000-2,500 steps on, VDN's 7
    # from 1,000 steps on (each checked every 500 steps up to 5,000).
    uniform = {**FAST, "exploration_fraction": 0.0, "exploration_final_eps": 1.0}
    trainer = train({**uniform, "mixer": mixer}, steps=3500)
    try:
        assert greedy_return(trainer) == paper
    finally:
        trainer.stop()


def test_independent_learners_settle_on_the_safe_7() -> None:
    trainer = train({**FAST, "mixer": None}, steps=3000)
    try:
        assert greedy_return(trainer) == 7.0
    finally:
        trainer.stop()


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("example", ["twostep-qmix", "twostep-vdn"])
def test_tuned_example_reaches_8(example: str) -> None:
    (exp,) = yaml.safe_load((TUNED / f"{example}.yaml").read_text()).values()
    trainer = QMixTrainer(env=exp["env"], config={**exp["config"], "seed": 1})
    try:
        while True:
            result = trainer.train()
            if result["episode_reward_mean"] >= exp["stop"]["episode_reward_mean"]:
                break
            if result["timesteps_total"] >= exp["stop"]["timesteps_total"]:
                break
    finally:
        trainer.stop()
    assert result["episode_reward_mean"] >= 8.0, result["episode_reward_mean"]
    assert np.isfinite(result["info"]["learner"]["default_policy"]["loss"])


def test_rllib_train_runs_qmix_from_the_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rayfield.rllib.scripts import cli

    runner = CliRunner()
    assert "QMIX" in runner.invoke(cli, ["train", "--help"]).output
    config = '{"learning_starts": 50, "timesteps_per_iteration": 100, "min_iter_time_s": 0}'
    stop = '{"timesteps_total": 200}'
    args = ["--env", "grouped_twostep", "--config", config, "--stop", stop]
    res = runner.invoke(cli, ["train", "--run", "QMIX", *args, "--local-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "episode_reward_mean" in res.output
