"""The tuned examples of MARWIL and BC (``slow``, ``nox -s learning``): from the episodes
of a PPO policy trained to 450 on CartPole-v1, each reaches an evaluation mean of 300."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_learning import load  # type: ignore[import-not-found]

from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.agents.registry import get_trainer_class


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("example", ["cartpole-bc", "cartpole-marwil"])
def test_offline_tuned_example_reaches_300(example: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    ppo_cfg = {**load("cartpole-ppo")["config"], "num_workers": 0, "seed": 0}
    ppo_cfg["rollout_fragment_length"] = 32
    ppo = PPOTrainer(env="CartPole-v1", config=ppo_cfg)
    try:
        result = ppo.train()
        while result["episode_reward_mean"] < 450:
            assert result["timesteps_total"] < 300_000, "PPO did not reach 450"
            result = ppo.train()
        writer_cfg = {**ppo_cfg, "output": str(data), "lr": 0.0}
        writer = PPOTrainer(env="CartPole-v1", config=writer_cfg)
        writer.set_weights(ppo.get_weights())
        worker = writer.workers.local_worker()
        steps = 0
        while steps < 20_000:
            steps += worker.sample().count
        writer.stop()
    finally:
        ppo.stop()
    exp = load(example)
    config: dict[str, Any] = {**exp["config"], "input": str(data), "seed": 1}
    trainer = get_trainer_class(exp["run"])(env="CartPole-v1", config=config)
    try:
        best = 0.0
        for _ in range(300):
            best = max(best, trainer.train()["evaluation"]["episode_reward_mean"])
            if best >= 300:
                break
        assert best >= 300, f"{example}: best evaluation mean {best:.1f}"
    finally:
        trainer.stop()
