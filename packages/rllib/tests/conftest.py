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


def _train_to(trainer: Any, target: float, budget: int, applications: Any = ()) -> dict[str, Any]:
    """Train until ``episode_reward_mean`` reaches `target` or `budget` env steps are
    spent; asserts the target was reached (the message: first and last mean, steps).
    Each of `applications` (``f(stop_event)``) runs in a thread meanwhile; when it ends
    the event is set, the trainer stopped and the threads joined."""
    import threading

    stop = threading.Event()
    threads = [threading.Thread(target=app, args=(stop,)) for app in applications]
    for t in threads:
        t.start()
    try:
        first = result = trainer.train()
        while result["episode_reward_mean"] < target and result["timesteps_total"] < budget:
            result = trainer.train()
    finally:
        stop.set()
        if threads:
            trainer.stop()
        for t in threads:
            t.join(10)
    assert result["episode_reward_mean"] >= target, (
        first["episode_reward_mean"],
        result["episode_reward_mean"],
        result["timesteps_total"],
    )
    return result


def _play_cartpole(client: Any, stop: Any, seed: int) -> None:
    """Play CartPole-v1 episodes (seeded `seed`, `seed` + 1, ...) through a `PolicyClient`
    until the event `stop` is set or the server goes away; closes the client."""
    import gymnasium as gym

    from rayfield.rllib.env.policy_client import PolicyServerError

    game = gym.make("CartPole-v1")
    try:
        while not stop.is_set():
            eid = client.start_episode()
            obs, _ = game.reset(seed=seed)
            seed += 1
            done = False
            while not done:
                obs, reward, term, trunc, _ = game.step(client.get_action(eid, obs))
                client.log_returns(eid, reward)
                done = term or trunc
            client.end_episode(eid, obs)
    except (PolicyServerError, ConnectionError, RuntimeError):
        pass  # the trainer stopped (a local-inference client: its sampler ended)
    finally:
        client.close()


@pytest.fixture
def play_cartpole() -> Any:
    """`_play_cartpole`: an application playing CartPole through a policy client."""
    return _play_cartpole


@pytest.fixture
def train_to() -> Any:
    """`_train_to`: train a trainer to a mean return within a step budget."""
    return _train_to


@pytest.fixture
def greedy_return() -> Any:
    """`_greedy_return`: how well a trained policy plays without exploring."""
    return _greedy_return


@pytest.fixture
def ppo_served_cartpole_config() -> dict[str, Any]:
    """PPO settings that learn CartPole from the steps of applications playing through an
    ExternalEnv (several at once, interleaved as the OS schedules them): local worker,
    seed 0, a 256-step batch trained 20 epochs."""
    return {
        "num_workers": 0,
        "seed": 0,
        "rollout_fragment_length": 256,
        "train_batch_size": 256,
        "sgd_minibatch_size": 256,
        "num_sgd_iter": 20,
        "lr": 1e-3,
        "gamma": 0.98,
        "lambda": 0.8,
        "kl_coeff": 0.0,
        "vf_clip_param": 1e6,
        "model": {"fcnet_hiddens": [64, 64]},
    }


@pytest.fixture
def dqn_cartpole_config() -> dict[str, Any]:
    """A small DQN setting (double Q, dueling, 3-step returns, prioritized replay) that
    lifts CartPole past a random policy within a few thousand env steps: the short
    learning checks build on it (the tuned example, `cartpole-dqn.yaml`, is set for a
    mean return of 450 instead). Local worker only, seed 0."""
    return {
        "n_step": 3,
        "lr": 0.001,
        "model": {"fcnet_hiddens": [64]},
        "hiddens": [64],
        "learning_starts": 500,
        "target_network_update_freq": 500,
        "schedule_max_timesteps": 10000,
        "exploration_fraction": 1.0,
        "min_iter_time_s": 0,
        "timesteps_per_iteration": 1000,
        "num_workers": 0,
        "seed": 0,
    }
