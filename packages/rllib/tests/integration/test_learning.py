"""Learning checks: each algorithm improves CartPole-v1 well past a random policy
(mean return ~22) within a budget of env steps, with fixed seeds.

The fast checks run the tuned examples' settings with the local worker only and
lower bars; the ``slow`` ones (``nox -s learning``) run each tuned example as
written until its stated return.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.testing import local_runtime

TUNED = Path(__file__).resolve().parents[2] / "tuned_examples"


def load(name: str) -> dict[str, Any]:
    spec = yaml.safe_load((TUNED / f"{name}.yaml").read_text())
    (exp,) = spec.values()
    return exp  # type: ignore[no-any-return]


def train_until(run: str, config: dict[str, Any], target: float, max_steps: int) -> dict[str, Any]:
    trainer = get_trainer_class(run)(env="CartPole-v1", config=config)
    try:
        while True:
            result = trainer.train()
            if result["episode_reward_mean"] >= target or result["timesteps_total"] >= max_steps:
                return result
    finally:
        trainer.stop()


FAST = [
    # (tuned example, run, target mean return, env-step budget)
    ("cartpole-ppo", "PPO", 150.0, 40_000),
    ("cartpole-pg", "PG", 90.0, 50_000),
    ("cartpole-a2c", "A2C", 120.0, 40_000),
    ("cartpole-dqn", "DQN", 90.0, 20_000),
    ("cartpole-impala", "IMPALA", 100.0, 40_000),
    ("cartpole-appo", "APPO", 100.0, 40_000),
    ("cartpole-es", "ES", 150.0, 30_000),
    ("cartpole-ars", "ARS", 150.0, 30_000),
]


@pytest.mark.parametrize(("example", "run", "target", "budget"), FAST, ids=[f[1] for f in FAST])
def test_learns_cartpole(example: str, run: str, target: float, budget: int) -> None:
    exp = load(example)
    assert exp["run"] == run
    config = {**exp["config"], "num_workers": 0, "seed": 0}
    if run == "PPO":  # the same total batch from the local worker's 8 envs
        config["rollout_fragment_length"] = 32
    if run in ("IMPALA", "APPO"):  # iterations of 2,000 steps instead of 2 s
        config.update({"min_iter_time_s": 0, "timesteps_per_iteration": 2000})
    result = train_until(run, config, target, budget)
    assert result["episode_reward_mean"] >= target, (
        f"{run}: mean return {result['episode_reward_mean']:.1f} after "
        f"{result['timesteps_total']} steps"
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a tuned example runs until its stated return: up to ~20 min
@pytest.mark.parametrize(
    "example",
    [
        "cartpole-ppo",
        "cartpole-pg",
        "cartpole-a2c",
        "cartpole-a3c",
        "cartpole-dqn",
        "cartpole-impala",
        "cartpole-appo",
        "cartpole-es",
        "cartpole-ars",
    ],
)
def test_tuned_example_reaches_its_return(example: str, tmp_path: Path) -> None:
    exp = load(example)
    target = exp["stop"]["episode_reward_mean"]
    budget = exp["stop"]["timesteps_total"]
    remote = exp["config"].get("num_workers", 0) > 0
    # the workers run on a private local runtime
    with local_runtime(temp_dir=tmp_path) if remote else contextlib.nullcontext():
        result = train_until(exp["run"], {**exp["config"], "seed": 1}, target, budget)
    assert result["episode_reward_mean"] >= target
