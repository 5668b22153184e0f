"""The reference's multi-agent examples run (a few iterations each): separate, shared and
weight-sharing policies, two trainers, rock-paper-scissors, hierarchical training."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the examples import each other

    def _load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    return _load


@pytest.mark.parametrize(("num_policies", "share"), [(2, False), (1, False), (2, True)])
def test_multiagent_cartpole_separate_shared_and_weight_sharing_policies(
    load: object, num_policies: int, share: bool
) -> None:
    example = load("multiagent_cartpole")  # type: ignore[operator]
    trainer = example.make_trainer(4, num_policies, share)
    try:
        result = trainer.train()
        pids = {f"policy_{i}" for i in range(num_policies)}
        assert set(result["policy_reward_mean"]) == pids
        assert result["timesteps_total"] >= 400
        if share:
            first, second = (trainer.get_policy(p).model for p in sorted(pids))
            assert first.shared is second.shared  # one module, so one set of weights
            assert first.pi is not second.pi
        elif num_policies == 2:  # separate networks of their own sizes
            sizes = {
                p: trainer.get_policy(p).get_weights()[next(iter(trainer.get_weights()[p]))].shape
                for p in pids
            }
            assert sizes["policy_0"] != sizes["policy_1"]
    finally:
        trainer.stop()


def test_two_trainers_train_their_own_policy_and_swap_weights(load: object) -> None:
    example = load("multiagent_two_trainers")  # type: ignore[operator]
    ppo, dqn = example.make_trainers()
    try:
        results = example.train_round(ppo, dqn)
        for name in ("PPO", "DQN"):
            assert set(results[name]["policy_reward_mean"]) == {"ppo_policy", "dqn_policy"}
        for pid, a, b in (("ppo_policy", ppo, dqn), ("dqn_policy", dqn, ppo)):
            got, want = b.get_weights([pid])[pid], a.get_weights([pid])[pid]
            assert all(np.array_equal(got[k], v) for k, v in want.items())
    finally:
        ppo.stop()
        dqn.stop()


def test_rock_paper_scissors_learned_policy_beats_the_heuristics(load: object) -> None:
    example = load("rock_paper_scissors_multiagent")  # type: ignore[operator]
    assert example.run_same_policy(1)["episode_reward_mean"] == 0.0  # zero-sum, one policy
    result = example.run_heuristic_vs_learned(stop_reward=3.0, max_iterations=40)
    assert result["lead"] >= 3.0, result["policy_reward_mean"]
    assert set(result["policy_reward_mean"]) == {"learned", "always_same", "beat_last"}


def test_hierarchical_training_runs_both_levels(load: object) -> None:
    example = load("hierarchical_training")  # type: ignore[operator]
    env = example.HierarchicalWindyMazeEnv()
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"high_level_agent"}
    obs, *_ = env.step({"high_level_agent": 1})
    assert set(obs) == {"low_level_1"}  # a new low-level agent for each high-level action
    result = example.main(1)
    assert set(result["policy_reward_mean"]) == {"high_level", "low_level"}
    assert example.main(1, flat=True)["timesteps_total"] > 0
