"""Synchronous parameter server: softmax regression on the digits data set.

A parameter-server actor holds the flat weight vector. Each step, every data-worker actor computes
a minibatch gradient against the current weights, and the server averages the gradients and takes
one SGD step. The loop never waits on the driver: the weights returned by ``apply_gradients`` go
straight, as an object ref, into the next round of ``compute_gradients`` calls, and the gradient
refs go into ``apply_gradients`` as varargs, which the runtime resolves before the call runs. The
learning rate grows with the number of workers (the constant linear scaling rule).

Ports the synchronous parameter server of Ray's example applications
(``examples/parameter_server/sync_parameter_server.py``, a TensorFlow CNN on MNIST), with numpy and
scikit-learn's bundled digits in place of TensorFlow and the MNIST download.

Prints the test accuracy every ``eval_every`` steps, then the final one (about 0.95; > 0.85 counts
as ok).

Sources:
    Li et al., "Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014.
    Goyal et al., "Accurate, Large Minibatch SGD" (linear scaling rule), arXiv:1706.02677.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import accuracy, load_digits_split, run_standalone, softmax_loss_grad

import rayfield as rf


@rf.remote(num_cpus=0)
class ParameterServer:
    """Holds the weights; applies the mean of the gradients it is given."""

    def __init__(self, dim: int, learning_rate: float) -> None:
        self.weights = np.zeros(dim)
        self.learning_rate = learning_rate

    def apply_gradients(self, *gradients: np.ndarray) -> np.ndarray:
        self.weights -= self.learning_rate * np.mean(gradients, axis=0)
        return self.weights.copy()

    def get_weights(self) -> np.ndarray:
        return self.weights.copy()


@rf.remote(num_cpus=1)
class DataWorker:
    """Holds one shard of the training set; returns minibatch gradients."""

    def __init__(self, data: tuple[np.ndarray, np.ndarray], index: int, num_workers: int) -> None:
        x, y = data
        self.x, self.y = x[index::num_workers], y[index::num_workers]
        self.rng = np.random.default_rng(index)

    def compute_gradients(self, weights: np.ndarray, batch_size: int) -> np.ndarray:
        rows = self.rng.choice(len(self.y), size=batch_size, replace=False)
        _, grad = softmax_loss_grad(weights, self.x[rows], self.y[rows])
        return grad / batch_size


def main(
    num_workers: int = 2,
    num_steps: int = 300,
    batch_size: int = 32,
    learning_rate: float = 0.25,
    eval_every: int = 50,
) -> dict[str, Any]:
    """Trains for ``num_steps`` synchronous steps; needs ``num_workers`` free CPUs.

    Returns:
        ``accuracy`` (test set), ``steps``, ``wall_s``, and ``ok`` (accuracy > 0.85).
    """
    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_digits_split()
    data = rf.put((x_train, y_train))
    server = ParameterServer.remote(x_train.shape[1] * 10, learning_rate * num_workers)
    workers = [DataWorker.remote(data, i, num_workers) for i in range(num_workers)]

    weights = server.get_weights.remote()
    for step in range(1, num_steps + 1):
        grads = [w.compute_gradients.remote(weights, batch_size) for w in workers]
        weights = server.apply_gradients.remote(*grads)
        if step % eval_every == 0:
            acc = accuracy(rf.get(weights), x_test, y_test)
            print(f"step {step:4d}: test accuracy {acc:.3f}")
    final = accuracy(rf.get(server.get_weights.remote()), x_test, y_test)
    wall_s = time.perf_counter() - start
    print(f"final test accuracy {final:.3f} after {num_steps} steps ({wall_s:.1f} s)")
    return {"accuracy": final, "steps": num_steps, "wall_s": wall_s, "ok": final > 0.85}


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
