"""Batch L-BFGS: softmax regression on the digits data set, loss and gradient computed in parallel.

The training set is cut into shards; each shard lives in a ``Shard`` actor. SciPy's L-BFGS-B
driver runs on the driver process; every time it asks for the objective, the parameters are put in
the object store once and the ref is sent to all shards (large arguments travel by ref, not by
value), which return their summed loss and gradient. The driver adds them up and adds an L2
penalty. At the end, the distributed objective is checked against the same objective computed
serially in the driver.

Ports the batch L-BFGS example of Ray's example applications (``examples/lbfgs/driver.py``, a
TensorFlow softmax model on MNIST batches with ``scipy.optimize.fmin_l_bfgs_b``), with numpy and
scikit-learn's bundled digits in place of TensorFlow and the MNIST download.

Prints the objective every 10 iterations, then the final loss, train and test accuracy, and the
largest difference between the distributed and the serial gradient.

Sources:
    Liu and Nocedal, "On the limited memory BFGS method for large scale optimization", 1989.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.optimize
from _common import accuracy, load_digits_split, run_standalone, softmax_loss_grad

import rayfield as rf


@rf.remote(num_cpus=1)
class Shard:
    """Holds rows of the training set; evaluates the summed loss and gradient on them."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        return softmax_loss_grad(theta, self.x, self.y)


def objective(
    theta: np.ndarray, parts: list[tuple[float, np.ndarray]], n: int, l2: float
) -> tuple[float, np.ndarray]:
    """Mean cross-entropy plus ``l2 / 2 * |theta|^2`` from per-shard (loss sum, gradient sum)."""
    loss = sum(p[0] for p in parts) / n + 0.5 * l2 * float(theta @ theta)
    grad = sum(p[1] for p in parts) / n + l2 * theta
    return loss, np.asarray(grad, dtype=np.float64)  # L-BFGS-B wants float64


def main(
    num_workers: int = 2, max_iterations: int = 100, l2: float = 1e-3, seed: int = 0
) -> dict[str, Any]:
    """Minimises the regularised loss with L-BFGS-B over ``num_workers`` shard actors.

    Returns:
        ``loss``, ``train_accuracy``, ``test_accuracy``, ``iterations``, ``evaluations``,
        ``max_grad_diff`` (distributed vs serial), ``wall_s``, and ``ok`` (test accuracy > 0.9 and
        the two gradients agree to 1e-9).
    """
    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_digits_split()
    n = len(y_train)
    shards = [
        Shard.remote(rf.put(x), rf.put(y))
        for x, y in zip(np.array_split(x_train, num_workers), np.array_split(y_train, num_workers))
    ]

    def distributed(theta: np.ndarray) -> tuple[float, np.ndarray]:
        theta_ref = rf.put(theta)
        return objective(theta, rf.get([s.loss_and_grad.remote(theta_ref) for s in shards]), n, l2)

    iteration = 0

    def report(intermediate_result: scipy.optimize.OptimizeResult) -> None:
        nonlocal iteration
        iteration += 1
        if iteration % 10 == 0:
            print(f"iteration {iteration:3d}: loss {intermediate_result.fun:.4f}")

    theta0 = 1e-2 * np.random.default_rng(seed).normal(size=x_train.shape[1] * 10)
    result = scipy.optimize.minimize(
        distributed,
        theta0,
        jac=True,
        method="L-BFGS-B",
        callback=report,
        options={"maxiter": max_iterations},
    )
    _, serial_grad = objective(result.x, [softmax_loss_grad(result.x, x_train, y_train)], n, l2)
    _, dist_grad = distributed(result.x)
    diff = float(np.max(np.abs(serial_grad - dist_grad)))
    train_acc = accuracy(result.x, x_train, y_train)
    test_acc = accuracy(result.x, x_test, y_test)
    wall_s = time.perf_counter() - start
    print(
        f"final loss {result.fun:.4f} after {result.nit} iterations ({result.nfev} evaluations); "
        f"train accuracy {train_acc:.3f}, test accuracy {test_acc:.3f}; "
        f"max |distributed - serial gradient| {diff:.1e} ({wall_s:.1f} s)"
    )
    return {
        "loss": float(result.fun),
        "train_accuracy": train_acc,
        "test_accuracy": test_acc,
        "iterations": int(result.nit),
        "evaluations": int(result.nfev),
        "max_grad_diff": diff,
        "wall_s": wall_s,
        "ok": test_acc > 0.9 and diff < 1e-9,
    }


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
