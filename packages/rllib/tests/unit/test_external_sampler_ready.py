"""`ExternalEnvSampler.sample_ready` through a `ServedEnv`: the threads that call the
env run the sampler themselves (as `PolicyServerInput`'s request threads do), with a
stub policy and no processes."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np

from rayfield.rllib.env.external_env import ServedEnv
from rayfield.rllib.evaluation.callbacks import DefaultCallbacks
from rayfield.rllib.evaluation.external_sampler import ExternalEnvSampler
from rayfield.rllib.evaluation.sampler_base import SamplerSettings
from rayfield.rllib.policy.sample_batch import SampleBatch


class SignPolicy:
    """Action 1 where obs[0] > 0; counts its forward passes and their rows."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.passes: list[int] = []

    def get_initial_state(self) -> list[Any]:
        return []

    def compute_actions(self, obs: np.ndarray) -> tuple[np.ndarray, list[Any], dict[str, Any]]:
        self.passes.append(len(obs))
        return (obs[:, 0] > 0).astype(np.int64), [], {"vf_preds": obs[:, 1].copy()}

    def postprocess_trajectory(self, batch: SampleBatch, *_: Any) -> SampleBatch:
        return batch


class Identity:
    def transform_batch(self, rows: list[Any]) -> np.ndarray:
        return np.asarray(rows, np.float32)


class PumpedEnv(ServedEnv):
    """Each call that posts an event runs the sampler in the caller's thread."""

    def __init__(self, fragment: int, batch_mode: str = "truncate_episodes") -> None:
        super().__init__(
            gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,), np.float32), pump=self._sample
        )
        self.policy = SignPolicy()
        self.sampler = ExternalEnvSampler(
            self,
            {"default_policy": self.policy},
            None,
            {"default_policy": Identity()},
            {"default_policy": lambda x: x},
            DefaultCallbacks(),
            SamplerSettings(fragment_length=fragment, batch_mode=batch_mode),
        )
        self.batches: list[SampleBatch] = []
        self.lock = threading.Lock()

    def _sample(self) -> None:
        with self.lock:
            self.batches.extend(self.sampler.sample_ready())


def play(env: PumpedEnv, steps: int, seed: int) -> list[tuple[float, int]]:
    """One episode of `steps` get_action steps (reward 1 each); (obs[0], action) pairs."""
    rng = np.random.default_rng(seed)
    eid = env.start_episode()
    seen = []
    for _ in range(steps):
        obs = rng.uniform(-1, 1, 2).astype(np.float32)
        seen.append((float(obs[0]), env.get_action(eid, obs)))
        env.log_returns(eid, 1.0)
    env.end_episode(eid, np.zeros(2, np.float32))
    return seen


def test_each_call_gets_its_action_at_once_and_batches_are_cut_at_the_fragment() -> None:
    env = PumpedEnv(fragment=5)
    seen = play(env, 7, seed=0) + play(env, 4, seed=1)
    assert all(action == int(x > 0) for x, action in seen)
    assert not env.is_alive()  # no env thread and no sampler thread: the caller sampled
    # truncate_episodes: a batch once 5 steps are complete (a step completes at the
    # next observation or at the end)
    assert [b.count for b in env.batches] == [5, 5]
    rows = SampleBatch.concat_samples(env.batches)
    assert rows["rewards"].tolist() == [1.0] * 10
    assert rows["terminateds"].tolist() == [False] * 6 + [True] + [False] * 3
    assert [m.episode_length for m in env.sampler.get_metrics()] == [7, 4]


def test_complete_episodes_mode_waits_for_whole_episodes() -> None:
    env = PumpedEnv(fragment=5, batch_mode="complete_episodes")
    play(env, 3, seed=0)
    assert env.batches == []
    play(env, 4, seed=1)
    assert [b.count for b in env.batches] == [7]


def test_concurrent_callers_get_their_own_actions_and_lose_no_step() -> None:
    threads = 4
    env = PumpedEnv(fragment=50)
    results: list[list[tuple[float, int]]] = [[] for _ in range(threads)]

    def worker(i: int) -> None:
        for episode in range(5):
            results[i] += play(env, 40, seed=100 * i + episode)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    assert not any(t.is_alive() for t in pool)
    assert all(len(r) == 200 and all(a == int(x > 0) for x, a in r) for r in results)
    # every step is in a batch (the last steps of each episode complete at its end)
    assert sum(b.count for b in env.batches) + env.sampler._steps == threads * 200
    assert sum(env.policy.passes) == threads * 200  # one row per get_action, none twice
