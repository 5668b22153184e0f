"""Asynchronous parameter server: softmax regression on the digits data set.

A parameter-server actor exposes ``pull`` and ``push``. Worker *tasks* receive the server's actor
handle as an argument and loop on their own: pull the latest weights, compute a minibatch gradient
on their shard, push the update without waiting for it (fire and forget). Updates from different
workers interleave and are applied to possibly stale weights (Hogwild-style asynchronous SGD). The
driver does not take part in training: it polls the workers with ``rf.wait(..., timeout=...)`` and
evaluates a snapshot of the weights each time the wait times out.

Ports the asynchronous parameter server of Ray's example applications
(``examples/parameter_server/async_parameter_server.py``, TensorFlow on MNIST), with numpy and
scikit-learn's bundled digits in place of TensorFlow and the MNIST download, and a fixed number of
steps per worker in place of the endless loop.

Prints the test accuracy and the number of applied updates at each poll, then the final accuracy
(about 0.95; > 0.85 counts as ok).

Sources:
    Li et al., "Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014.
    Recht et al., "Hogwild!: A Lock-Free Approach to Parallelizing SGD", NeurIPS 2011.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import accuracy, load_digits_split, run_standalone, softmax_loss_grad

import rayfield as rf


@rf.remote(num_cpus=0)
class ParameterServer:
    """Holds the weights; adds every pushed update to them."""

    def __init__(self, weights: np.ndarray) -> None:
        # Arrays read from the object store are read-only: keep a private, writable copy.
        self.weights = weights.copy()
        self.num_updates = 0

    def push(self, update: np.ndarray) -> None:
        self.weights += update
        self.num_updates += 1

    def pull(self) -> np.ndarray:
        return self.weights.copy()

    def stats(self) -> int:
        return self.num_updates


@rf.remote
def train_worker(
    server: Any,
    data: tuple[np.ndarray, np.ndarray],
    index: int,
    num_workers: int,
    num_steps: int,
    batch_size: int,
    learning_rate: float,
) -> int:
    """Runs ``num_steps`` pull/compute/push rounds on shard ``index``; returns the steps done."""
    x, y = data
    x, y = x[index::num_workers], y[index::num_workers]
    rng = np.random.default_rng(index)
    for _ in range(num_steps):
        weights = rf.get(server.pull.remote())
        rows = rng.choice(len(y), size=batch_size, replace=False)
        _, grad = softmax_loss_grad(weights, x[rows], y[rows])
        server.push.remote(-learning_rate / batch_size * grad)
    # Calls from one caller run in order, so this returns after all of this worker's pushes.
    rf.get(server.stats.remote())
    return num_steps


def main(
    num_workers: int = 2,
    steps_per_worker: int = 200,
    batch_size: int = 32,
    learning_rate: float = 0.25,
    poll_s: float = 0.5,
) -> dict[str, Any]:
    """Trains with ``num_workers`` concurrent worker tasks of ``steps_per_worker`` steps each.

    Returns:
        ``accuracy`` (test set), ``updates`` (pushes applied), ``wall_s``, and ``ok``
        (accuracy > 0.85 and every push applied).
    """
    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_digits_split()
    data = rf.put((x_train, y_train))
    server = ParameterServer.remote(np.zeros(x_train.shape[1] * 10))
    pending = [
        train_worker.remote(
            server, data, i, num_workers, steps_per_worker, batch_size, learning_rate
        )
        for i in range(num_workers)
    ]
    while pending:
        _, pending = rf.wait(pending, num_returns=len(pending), timeout=poll_s)
        weights, updates = rf.get([server.pull.remote(), server.stats.remote()])
        acc = accuracy(weights, x_test, y_test)
        print(
            f"{time.perf_counter() - start:5.1f} s: {updates:4d} updates, test accuracy {acc:.3f}"
        )
    final = accuracy(rf.get(server.pull.remote()), x_test, y_test)
    updates = rf.get(server.stats.remote())
    wall_s = time.perf_counter() - start
    print(f"final test accuracy {final:.3f} after {updates} updates ({wall_s:.1f} s)")
    ok = final > 0.85 and updates == num_workers * steps_per_worker
    return {"accuracy": final, "updates": updates, "wall_s": wall_s, "ok": ok}


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
