"""Policy gradient (REINFORCE): a linear softmax policy on CartPole-v1, rollouts in parallel.

Each ``RolloutWorker`` actor owns an environment. Every iteration the driver puts the policy
weights once and asks each worker for a few episodes; it takes the sample batches in the order
they finish (``rf.wait`` with ``num_returns=1``), standardises the discounted returns-to-go into
advantages, and climbs the REINFORCE gradient with Adam. The policy is
``softmax([obs / scale, 1] @ W)`` with ``W`` of shape ``float64[5, 2]``.

Ports the policy-gradient examples of Ray's example applications (``examples/rl_pong/driver.py``,
Karpathy's numpy policy gradient on Atari Pong, and the RLlib PG pointer), with gymnasium's
CartPole-v1 in place of Pong and the Atari ROMs.

Prints the mean episode return per iteration (starts near 20 and reaches 400 to 500 within 25
iterations; the cap is 500).

Sources:
    Williams, "Simple statistical gradient-following algorithms for connectionist reinforcement
    learning", Machine Learning 8, 1992.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import CARTPOLE_OBS_SCALE, Adam, make_cartpole, run_standalone

import rayfield as rf


def features(obs: np.ndarray) -> np.ndarray:
    """``float64[..., 5]``: scaled observations plus a bias input."""
    scaled = np.asarray(obs, dtype=np.float64) / CARTPOLE_OBS_SCALE
    return np.concatenate([scaled, np.ones((*scaled.shape[:-1], 1))], axis=-1)


def action_probs(weights: np.ndarray, phi: np.ndarray) -> np.ndarray:
    logits = phi @ weights
    logits -= logits.max(axis=-1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=-1, keepdims=True)


@rf.remote(num_cpus=1)
class RolloutWorker:
    """Plays episodes with the given weights; returns a sample batch."""

    def __init__(self, seed: int, gamma: float) -> None:
        self.env = make_cartpole()
        self.rng = np.random.default_rng(seed)
        self.gamma = gamma

    def sample(self, weights: np.ndarray, num_episodes: int, episode_seed: int) -> dict[str, Any]:
        phis, actions, returns, totals = [], [], [], []
        for episode in range(num_episodes):
            obs, _ = self.env.reset(seed=episode_seed + episode)
            rewards, done = [], False
            while not done:
                phi = features(obs)
                action = int(self.rng.random() < action_probs(weights, phi)[1])
                obs, reward, terminated, truncated, _ = self.env.step(action)
                phis.append(phi)
                actions.append(action)
                rewards.append(float(reward))
                done = terminated or truncated
            to_go, running = np.zeros(len(rewards)), 0.0
            for t in reversed(range(len(rewards))):
                running = rewards[t] + self.gamma * running
                to_go[t] = running
            returns.append(to_go)
            totals.append(sum(rewards))
        return {
            "features": np.array(phis),
            "actions": np.array(actions),
            "returns": np.concatenate(returns),
            "episode_returns": totals,
        }


def reinforce_gradient(weights: np.ndarray, batch: dict[str, np.ndarray]) -> np.ndarray:
    """Mean over steps of ``advantage * d log pi(a|s) / dW``, with standardised returns."""
    adv = batch["returns"] - batch["returns"].mean()
    adv /= adv.std() + 1e-8
    phi = batch["features"]
    dlogits = -action_probs(weights, phi)
    dlogits[np.arange(len(adv)), batch["actions"]] += 1.0
    return phi.T @ (adv[:, None] * dlogits) / len(adv)


def main(
    num_workers: int = 2,
    num_iterations: int = 25,
    episodes_per_worker: int = 8,
    learning_rate: float = 0.1,
    gamma: float = 0.99,
    seed: int = 0,
) -> dict[str, Any]:
    """Trains for ``num_iterations`` iterations of ``num_workers * episodes_per_worker`` episodes.

    Returns:
        ``first_reward``, ``final_reward`` (mean episode return of the first and last iteration),
        ``rewards`` (per iteration), ``episodes``, ``wall_s``, and ``ok`` (the final return beats
        the first by 100 or more).
    """
    start = time.perf_counter()
    workers = [RolloutWorker.remote(seed + 1 + i, gamma) for i in range(num_workers)]
    weights = np.zeros((5, 2))
    optimizer = Adam(weights.size, learning_rate)
    rewards: list[float] = []
    for it in range(1, num_iterations + 1):
        weights_ref = rf.put(weights)
        pending = [
            w.sample.remote(weights_ref, episodes_per_worker, 10_000 * it + 100 * i)
            for i, w in enumerate(workers)
        ]
        batches = []
        while pending:
            ready, pending = rf.wait(pending, num_returns=1)
            batches.append(rf.get(ready[0]))
        batch = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
        grad = reinforce_gradient(weights, batch)
        weights = weights + optimizer.step(grad.ravel()).reshape(weights.shape)
        rewards.append(float(np.mean(batch["episode_returns"])))
        print(f"iteration {it:2d}: mean episode return {rewards[-1]:6.1f}")
    wall_s = time.perf_counter() - start
    print(f"mean episode return {rewards[0]:.1f} -> {rewards[-1]:.1f} ({wall_s:.1f} s)")
    return {
        "first_reward": rewards[0],
        "final_reward": rewards[-1],
        "rewards": rewards,
        "episodes": num_iterations * num_workers * episodes_per_worker,
        "wall_s": wall_s,
        "ok": rewards[-1] >= rewards[0] + 100,
    }


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
