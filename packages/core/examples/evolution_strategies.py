"""Evolution strategies: a linear CartPole-v1 policy trained by antithetic random search.

The driver puts one large table of Gaussian noise in the object store and passes its ref to every
``Worker`` actor's constructor, so all workers read the same table instead of each making its own
copy. Each iteration the driver puts the current parameters once; each worker draws offsets into
the noise table, plays one episode with ``theta + sigma * eps`` and one with ``theta - sigma *
eps`` (mirrored sampling), and returns only the offsets and the returns. The driver rebuilds the
perturbations from its own copy of the table, turns the returns into centred ranks and takes an
Adam step along the estimated gradient. The policy pushes right when ``w . (obs / scale) + b > 0``,
with a fixed per-coordinate scale standing in for ARS-style observation normalisation.

Ports the evolution strategies example of Ray's example applications (``rllib`` ES, TensorFlow on
MuJoCo Humanoid with a 250M-float noise table), with a numpy linear policy on gymnasium's
CartPole-v1 and a 1M-float table.

Prints, per iteration, the mean return of the perturbed policies and of the unperturbed policy
(starts near 20 and reaches 300 to 500 in 20 iterations; the cap is 500).

Sources:
    Salimans et al., "Evolution Strategies as a Scalable Alternative to Reinforcement Learning",
    arXiv:1703.03864.
    Mania et al., "Simple random search provides a competitive approach to RL", arXiv:1803.07055.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import CARTPOLE_OBS_SCALE, Adam, make_cartpole, run_episode, run_standalone

import rayfield as rf

NUM_PARAMS = 5  # 4 observation weights and a bias


def linear_policy(theta: np.ndarray) -> Any:
    return lambda obs: int((obs / CARTPOLE_OBS_SCALE) @ theta[:4] + theta[4] > 0)


@rf.remote(num_cpus=1)
class Worker:
    """Evaluates mirrored perturbations of the policy, drawn from the shared noise table."""

    def __init__(self, noise: np.ndarray, sigma: float, seed: int) -> None:
        self.noise = noise  # read-only view of the shared table
        self.sigma = sigma
        self.rng = np.random.default_rng(seed)
        self.env = make_cartpole()

    def do_rollouts(self, theta: np.ndarray, num_pairs: int, episode_seed: int) -> dict[str, Any]:
        offsets = self.rng.integers(0, len(self.noise) - NUM_PARAMS, size=num_pairs)
        returns = np.zeros((num_pairs, 2))
        for i, offset in enumerate(offsets):
            eps = self.sigma * self.noise[offset : offset + NUM_PARAMS]
            for j, sign in enumerate((1.0, -1.0)):
                returns[i, j], _ = run_episode(
                    self.env, linear_policy(theta + sign * eps), episode_seed + i
                )
        return {"offsets": offsets, "returns": returns}


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Maps values to their ranks scaled into [-0.5, 0.5] (fitness shaping)."""
    ranks = np.empty(x.size)
    ranks[x.ravel().argsort()] = np.arange(x.size)
    return (ranks / (x.size - 1) - 0.5).reshape(x.shape)


def main(
    num_workers: int = 2,
    num_iterations: int = 20,
    pairs_per_worker: int = 8,
    sigma: float = 0.1,
    learning_rate: float = 0.1,
    noise_size: int = 1_000_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Runs ``num_iterations`` ES iterations of ``num_workers * pairs_per_worker`` mirrored pairs.

    Returns:
        ``first_reward`` and ``final_reward`` (mean perturbed return of the first and last
        iteration), ``policy_reward`` (return of the final unperturbed policy), ``rewards`` (per
        iteration), ``wall_s``, and ``ok`` (the final return beats the first by 100 or more).
    """
    start = time.perf_counter()
    noise = np.random.default_rng(seed).standard_normal(noise_size).astype(np.float32)
    noise_ref = rf.put(noise)
    workers = [Worker.remote(noise_ref, sigma, seed + 1 + i) for i in range(num_workers)]
    theta = np.zeros(NUM_PARAMS)
    optimizer = Adam(NUM_PARAMS, learning_rate)
    env = make_cartpole()
    rewards: list[float] = []
    for it in range(1, num_iterations + 1):
        theta_ref = rf.put(theta)
        results = rf.get(
            [
                w.do_rollouts.remote(theta_ref, pairs_per_worker, 10_000 * it + 100 * i)
                for i, w in enumerate(workers)
            ]
        )
        offsets = np.concatenate([r["offsets"] for r in results])
        returns = np.concatenate([r["returns"] for r in results])
        eps = np.stack([noise[o : o + NUM_PARAMS] for o in offsets])
        shaped = centered_ranks(returns)
        grad = (shaped[:, 0] - shaped[:, 1]) @ eps / (len(offsets) * sigma)
        theta = theta + optimizer.step(grad)
        rewards.append(float(returns.mean()))
        policy_reward, _ = run_episode(env, linear_policy(theta), seed)
        print(
            f"iteration {it:2d}: mean perturbed return {rewards[-1]:6.1f}, "
            f"policy return {policy_reward:5.1f}"
        )
    wall_s = time.perf_counter() - start
    print(f"mean return {rewards[0]:.1f} -> {rewards[-1]:.1f} ({wall_s:.1f} s)")
    return {
        "first_reward": rewards[0],
        "final_reward": rewards[-1],
        "policy_reward": policy_reward,
        "rewards": rewards,
        "wall_s": wall_s,
        "ok": rewards[-1] >= rewards[0] + 100,
    }


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
