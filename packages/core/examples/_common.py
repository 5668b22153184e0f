"""Helpers shared by the example applications: data, models, CartPole rollouts, standalone runs.

Nothing here talks to the runtime except :func:`run_standalone`, which starts and stops it when an
example is run as a script. The digits data set ships with scikit-learn and CartPole with gymnasium,
so every example runs offline. scikit-learn and gymnasium are imported lazily, inside the functions
that need them, so that importing an example stays cheap for a worker.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import rayfield as rf

EXAMPLES_DIR = Path(__file__).resolve().parent
NUM_CLASSES = 10


# ---- digits and softmax regression ----------------------------------------------------------


def load_digits_split(
    test_fraction: float = 0.25, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Loads scikit-learn's bundled 8x8 digits (1,797 images) and splits them.

    Returns:
        ``(x_train, y_train, x_test, y_test)``: ``x`` is ``float64[n, 65]`` (64 pixels scaled to
        [0, 1] plus a constant bias column), ``y`` is ``int64[n]`` with labels 0..9.
    """
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = np.hstack([x / 16.0, np.ones((len(x), 1))])
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def softmax_loss_grad(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Summed cross-entropy of softmax regression and its gradient.

    Sums rather than means, so that the values of disjoint shards add up to the full data set's.

    Args:
        theta: ``float64[num_features * 10]``, the flattened weight matrix.
        x: ``float64[n, num_features]``.
        y: ``int64[n]``.
    """
    weights = theta.reshape(x.shape[1], NUM_CLASSES)
    logits = x @ weights
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    rows = np.arange(len(y))
    loss = -float(log_probs[rows, y].sum())
    delta = np.exp(log_probs)
    delta[rows, y] -= 1.0
    return loss, (x.T @ delta).ravel()


def accuracy(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of rows of ``x`` whose most likely class under ``theta`` equals ``y``."""
    predicted = np.argmax(x @ theta.reshape(x.shape[1], NUM_CLASSES), axis=1)
    return float(np.mean(predicted == y))


class Adam:
    """Adam step sizes for gradient *ascent* on a flat parameter vector.

    Sources:
        Kingma and Ba, "Adam: A Method for Stochastic Optimization", arXiv:1412.6980.
    """

    def __init__(self, size: int, learning_rate: float, beta1: float = 0.9, beta2: float = 0.999):
        self.learning_rate, self.beta1, self.beta2 = learning_rate, beta1, beta2
        self.m, self.v, self.t = np.zeros(size), np.zeros(size), 0

    def step(self, grad: np.ndarray) -> np.ndarray:
        """Returns the increment to add to the parameters, given the gradient to climb."""
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad**2
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        return self.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)


# ---- CartPole -------------------------------------------------------------------------------

# Typical magnitudes of CartPole's observations (cart position, cart velocity, pole angle in
# radians, pole angular velocity); linear policies divide by them, a fixed stand-in for
# observation normalisation.
CARTPOLE_OBS_SCALE = np.array([2.4, 2.0, 0.21, 2.0])


def make_cartpole() -> Any:
    """Creates gymnasium's ``CartPole-v1`` (observation ``float32[4]``, two actions, cap 500)."""
    import gymnasium

    return gymnasium.make("CartPole-v1")


def run_episode(env: Any, act: Callable[[np.ndarray], int], seed: int) -> tuple[float, int]:
    """Plays one episode with ``act(observation) -> action``; returns (total reward, steps)."""
    obs, _ = env.reset(seed=seed)
    total, steps, done = 0.0, 0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(act(obs))
        total += float(reward)
        steps += 1
        done = terminated or truncated
    return total, steps


# ---- running an example as a script ----------------------------------------------------------


def ship_by_value(module: ModuleType) -> None:
    """Sends ``module``'s functions and classes to workers by value instead of by name.

    The examples are plain modules next to the driver script, not an installed package. A
    worker of an embedded runtime inherits the driver's ``sys.path`` and could import them,
    but the workers of a cluster's nodes were started by ``rayfield start``, possibly on
    another machine, and cannot (in Ray the fix is ``runtime_env={"working_dir": ...}`` or
    installing the package). Pickled by value, the remote functions and actor classes of
    ``module``, and the helpers of this module they call, travel with the task.
    """
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def prepare_worker_environment() -> None:
    """Lets worker processes run the examples' code and keeps each one on a single BLAS thread.

    Ships this module by value (:func:`ship_by_value`; call it on each example module
    imported by name too) and, for workers started by an embedded runtime, puts this folder
    on ``PYTHONPATH``. Must run before the runtime starts: workers inherit the driver's
    environment.
    """
    ship_by_value(sys.modules[__name__])
    path = os.environ.get("PYTHONPATH", "")
    if str(EXAMPLES_DIR) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXAMPLES_DIR), path) if p)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")


def run_standalone(main: Callable[..., dict[str, Any]], description: str) -> None:
    """Runs an example as a script; exits 1 if its ``main`` reports not ok.

    Parses ``--num-workers`` and ``--num-cpus``, starts the runtime, runs ``main``, stops it.
    """
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    prepare_worker_environment()
    rf.init(num_cpus=max(args.num_cpus, args.num_workers))
    try:
        metrics = main(num_workers=args.num_workers)
    finally:
        rf.shutdown()
    sys.exit(0 if metrics["ok"] else 1)
