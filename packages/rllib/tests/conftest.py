"""Shared fixtures of rayfield-rllib's tests, from :mod:`rayfield.testing`."""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["rayfield.testing"]


@pytest.fixture(scope="session")
def rayfield_known_leaks(rayfield_known_leaks: list[str]) -> list[str]:
    # Not rayfield's: torch starts its intra-op thread pool (and jemalloc its background
    # thread) in this process on first use and keeps them for the life of the process.
    return [*rayfield_known_leaks, r"^native thread "]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: long-running learning or stress runs, excluded from the default suite"
    )


@pytest.fixture(scope="module")
def cluster(rayfield_module_runtime: dict[str, Any]) -> dict[str, Any]:
    """``rayfield.testing``'s module runtime (2 CPUs, a 256 MiB store, a private temp dir)
    shared by the tests of one module; shut down and checked for leaks after it."""
    return rayfield_module_runtime


def _greedy_return(trainer: Any, episodes: int = 5, env: Any = None) -> float:
    """Mean return of `trainer`'s greedy policy over `episodes` CartPole-v1 episodes
    (or episodes of `env`), seeded 10000, 10001..."""
    import gymnasium as gym

    env = env or gym.make("CartPole-v1")
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)
        done = False
        while not done:
            obs, r, term, trunc, _ = env.step(trainer.compute_action(obs, explore=False))
            total += float(r)
            done = term or trunc
    return total / episodes


@pytest.fixture
def greedy_return() -> Any:
    """`_greedy_return`: how well a trained policy plays without exploring."""
    return _greedy_return


@pytest.fixture
def dqn_cartpole_config() -> dict[str, Any]:
    """The tuned cartpole-dqn example's config, local worker only, seed 0."""
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[1] / "tuned_examples" / "cartpole-dqn.yaml"
    (exp,) = yaml.safe_load(path.read_text()).values()
    return {**exp["config"], "num_workers": 0, "seed": 0}
