"""DQN's distributional (C51), noisy-net and parametric-action options: the parts
checked by hand, then each one learning CartPole-v1 well past a random policy (~22),
judged by the greedy policy's return (bars kept low so each run is short)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from rayfield.rllib.agents.dqn import DQNTrainer
from rayfield.rllib.agents.dqn.dqn_model import NoisyLinear, project_distribution

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_projection_moves_mass_onto_the_support() -> None:
    support = torch.tensor([-1.0, 0.0, 1.0])
    at_zero = torch.tensor([[0.0, 1.0, 0.0]])
    # r + 1 * 0 = 0.5: half to atom 0, half to atom 1
    out = project_distribution(at_zero, torch.tensor([0.5]), torch.tensor([1.0]), support)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.5, 0.5]]))
    # terminal: every atom collapses onto r (exactly on atom 1 here)
    uniform = torch.full((1, 3), 1 / 3)
    out = project_distribution(uniform, torch.tensor([1.0]), torch.tensor([0.0]), support)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 1.0]]))
    # shifting by +1 clips at v_max and keeps the total mass
    out = project_distribution(uniform, torch.tensor([1.0]), torch.tensor([1.0]), support)
    torch.testing.assert_close(out, torch.tensor([[0.0, 1 / 3, 2 / 3]]))


def test_noisy_linear_draws_noise_and_learns_its_scale() -> None:
    layer = NoisyLinear(4, 3, sigma0=0.5)
    torch.testing.assert_close(layer.sigma_w, torch.full((3, 4), 0.25))  # sigma0 / sqrt(4)
    x = torch.ones(2, 4)
    assert not torch.allclose(layer(x), layer(x))  # new noise every pass
    layer.noise = False
    torch.testing.assert_close(layer(x), layer(x))
    layer.noise = True
    layer(x).sum().backward()
    assert layer.sigma_w.grad is not None and layer.sigma_w.grad.abs().sum() > 0


def train(
    config: dict[str, Any],
    env: str,
    bar: float,
    max_iters: int,
    greedy_return: Any,
    eval_env: Any = None,
) -> tuple[float, dict[str, Any], dict[str, Any]]:
    trainer = DQNTrainer(env=env, config=config)
    best, result = 0.0, {}
    try:
        for _ in range(max_iters):
            result = trainer.train()
            if result["timesteps_total"] >= 4000 and result["episode_reward_mean"] > 25:
                best = max(best, greedy_return(trainer, env=eval_env))
                if best >= bar:
                    break
        stats = result["info"]["learner"]["default_policy"]
    finally:
        trainer.stop()
    return best, result, stats


def test_c51_learns_cartpole(dqn_cartpole_config: dict, greedy_return: Any) -> None:
    config = {**dqn_cartpole_config, "num_atoms": 51, "v_min": 0.0, "v_max": 60.0}
    best, result, stats = train(config, "CartPole-v1", 60.0, 12, greedy_return)
    assert best >= 60.0, (best, result["timesteps_total"])
    assert 0.0 <= stats["mean_q"] <= 60.0  # expected values of the support


def test_noisy_nets_explore_with_their_noise(dqn_cartpole_config: dict) -> None:
    trainer = DQNTrainer(env="CartPole-v1", config={**dqn_cartpole_config, "noisy": True})
    try:
        policy = trainer.get_policy()
        assert policy.cur_epsilon == 0.0
        obs = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
        greedy = [policy.compute_actions(obs, explore=False)[0] for _ in range(2)]
        noisy = [policy.compute_actions(obs, explore=True)[0] for _ in range(2)]
        np.testing.assert_array_equal(greedy[0], greedy[1])  # mean weights: deterministic
        assert (noisy[0] != noisy[1]).any()  # fresh noise per pass changes some actions
    finally:
        trainer.stop()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_noisy_nets_learn_cartpole_without_epsilon(
    dqn_cartpole_config: dict, greedy_return: Any
) -> None:
    config = {**dqn_cartpole_config, "noisy": True, "sigma0": 0.5}
    best, result, stats = train(config, "CartPole-v1", 60.0, 14, greedy_return)
    assert best >= 60.0, (best, result["timesteps_total"])
    assert stats["cur_epsilon"] == 0.0


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parametric_actions_learn_with_the_action_mask(greedy_return: Any) -> None:
    example = load_example("parametric_actions_cartpole")
    env = example.ParametricCartPole({})
    # the env refuses masked slots, so any unmasked choice would end the run
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="masked out"):
        env.step(int(np.flatnonzero(obs["action_mask"] == 0)[0]))
    best, result, _ = train(example.CONFIG, "ParametricCartPole", 100.0, 15, greedy_return, env)
    assert best >= 100.0, (best, result["timesteps_total"])
