"""The worker preload rllib asks for when it starts the cluster itself (no processes)."""

from __future__ import annotations

import pytest

from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.evaluation.rollout_worker import resolve_policy_class
from rayfield.rllib.utils.preload import ENV_PRELOAD, init_options, worker_preload_modules


def test_ppo_preloads_torch_the_rollout_worker_and_its_policy_module() -> None:
    modules = worker_preload_modules(PPOTrainer._policy)
    assert modules[0] == "torch"
    assert "rayfield.rllib.evaluation.rollout_worker" in modules
    assert "rayfield.rllib.agents.ppo.ppo_torch_policy" in modules
    policy_cls = resolve_policy_class(PPOTrainer._policy)
    assert worker_preload_modules(policy_cls) == modules  # a class names the same module


def test_a_policy_defined_in_main_adds_no_module() -> None:
    Local = type("Local", (), {"__module__": "__main__"})
    assert worker_preload_modules(Local) == worker_preload_modules(None)


def test_the_user_s_environment_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_PRELOAD, raising=False)
    assert init_options()["worker_preload_modules"][0] == "torch"
    monkeypatch.setenv(ENV_PRELOAD, "")  # off, as the user asked
    assert init_options() == {}
