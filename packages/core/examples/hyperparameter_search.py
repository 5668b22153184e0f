"""Random hyperparameter search that processes each result as soon as it is ready.

Usage (from this folder)::

    python hyperparameter_search.py --num-workers 2

A remote function trains a one-hidden-layer network (numpy, minibatch SGD with inverted
dropout) on scikit-learn's digits and returns its validation accuracy. The data goes into the
object store once (``rf.put``); every trial gets the same refs. The driver keeps ``max_pending``
trials in flight; ``rf.wait(pending, num_returns=1)`` hands back whichever finishes first, the
driver looks up that trial's hyperparameters in a dict keyed by the object ref, prints the
accuracy and starts a new trial, until ``num_trials`` have finished.

The four hyperparameters are those of the reference: learning rate, batch size, dropout
probability and the standard deviation of the initial weights (sampled log-uniformly where
the reference does, over ranges narrowed so that a 2-core run of a few seconds finds good ones).

Ports "Hyperparameter Optimization" of the Ray 0.2.2 manual (random search; processing results
as they become available with ``ray.wait``; object refs as dict keys). Prints each accuracy and
the best one over all trials.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import NUM_CLASSES, load_digits_split, run_standalone

import rayfield as rf

HIDDEN_UNITS = 64


def generate_hyperparameters(rng: np.random.Generator) -> dict[str, float | int]:
    """One random configuration: learning rate, batch size, dropout, init stddev."""
    return {
        "learning_rate": float(10 ** rng.uniform(-3, 0)),
        "batch_size": int(rng.integers(8, 128)),
        "dropout": float(rng.uniform(0, 0.7)),
        "stddev": float(10 ** rng.uniform(-3, 0)),
    }


def train_network(
    hyperparameters: dict[str, Any],
    x_train: np.ndarray,
    y_train: np.ndarray,
    epochs: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Trains ``x -> relu(x W1 + b1) -> softmax(h W2 + b2)`` by minibatch SGD.

    Args:
        hyperparameters: ``learning_rate`` (SGD step on the mean cross-entropy), ``batch_size``,
            ``dropout`` (probability of zeroing a hidden unit while training; inverted dropout,
            Srivastava et al., JMLR 15, 2014) and ``stddev`` (of the normal initial weights).
        x_train: ``float64[n, d]``; y_train: ``int64[n]`` in 0..9.
        epochs: passes over the training data.
        seed: for the initial weights, the minibatch order and the dropout masks.

    Returns:
        ``(w1 float64[d, 64], b1 float64[64], w2 float64[64, 10], b2 float64[10])``.
    """
    rng = np.random.default_rng(seed)
    lr, batch = hyperparameters["learning_rate"], int(hyperparameters["batch_size"])
    keep, std = 1.0 - hyperparameters["dropout"], hyperparameters["stddev"]
    w1 = rng.normal(0, std, size=(x_train.shape[1], HIDDEN_UNITS))
    b1 = np.zeros(HIDDEN_UNITS)
    w2 = rng.normal(0, std, size=(HIDDEN_UNITS, NUM_CLASSES))
    b2 = np.zeros(NUM_CLASSES)
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        for first in range(0, len(order), batch):
            rows = order[first : first + batch]
            x, y = x_train[rows], y_train[rows]
            mask = (rng.random((len(rows), HIDDEN_UNITS)) < keep) / keep
            hidden = np.maximum(x @ w1 + b1, 0.0) * mask
            logits = hidden @ w2 + b2
            logits -= logits.max(axis=1, keepdims=True)
            probs = np.exp(logits)
            probs /= probs.sum(axis=1, keepdims=True)
            probs[np.arange(len(rows)), y] -= 1.0
            d_logits = probs / len(rows)
            d_hidden = (d_logits @ w2.T) * mask * (hidden > 0)
            w2 -= lr * hidden.T @ d_logits
            b2 -= lr * d_logits.sum(axis=0)
            w1 -= lr * x.T @ d_hidden
            b1 -= lr * d_hidden.sum(axis=0)
    return w1, b1, w2, b2


@rf.remote
def train_and_compute_accuracy(
    hyperparameters: dict[str, Any],
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    epochs: int,
    seed: int,
) -> tuple[float, float]:
    """Trains with ``hyperparameters``; returns (validation accuracy, time.time() at the end)."""
    w1, b1, w2, b2 = train_network(hyperparameters, x_train, y_train, epochs, seed)
    predicted = np.argmax(np.maximum(x_val @ w1 + b1, 0.0) @ w2 + b2, axis=1)
    return float(np.mean(predicted == y_val)), time.time()


def main(
    num_workers: int = 2,
    num_trials: int = 16,
    max_pending: int = 4,
    epochs: int = 10,
    seed: int = 0,
    configs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Runs ``num_trials`` trials, at most ``max_pending`` in flight, consuming each when done.

    ``num_workers`` is unused: the trials spread over every CPU of the runtime. ``configs``,
    if given, are tried first (each may set its own ``epochs``), then random ones.

    Returns:
        ``trials``, ``best_accuracy``, ``best_hyperparameters``, ``accuracies`` and
        ``finished_at`` (per trial, in the order consumed), ``consumed`` (trial numbers in
        the order consumed; trial ``i`` was submitted ``i``-th), ``wall_s``, and ``ok``
        (best accuracy above 0.9; chance is 0.1).
    """
    del num_workers
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    x_train, y_train, x_val, y_val = load_digits_split(seed=seed)
    x_train, x_val = x_train[:, :-1], x_val[:, :-1]  # the network has its own biases
    data = [rf.put(a) for a in (x_train, y_train, x_val, y_val)]
    queued = list(configs or [])

    # Object refs are hashable: the dict maps each pending result to its trial.
    trial_of: dict[Any, tuple[int, dict[str, Any]]] = {}

    def launch(number: int) -> Any:
        config = queued.pop(0) if queued else generate_hyperparameters(rng)
        hyperparameters = {k: v for k, v in config.items() if k != "epochs"}
        ref = train_and_compute_accuracy.remote(
            hyperparameters, *data, int(config.get("epochs", epochs)), seed + number
        )
        trial_of[ref] = (number, hyperparameters)
        return ref

    pending = [launch(number) for number in range(min(max_pending, num_trials))]
    submitted = len(pending)
    consumed, accuracies, finished_at = [], [], []
    best_accuracy, best_hyperparameters = -1.0, {}
    while pending:
        ready, pending = rf.wait(pending, num_returns=1)
        number, hyperparameters = trial_of.pop(ready[0])
        accuracy, done_at = rf.get(ready[0])
        consumed.append(number)
        accuracies.append(accuracy)
        finished_at.append(done_at)
        shown = ", ".join(f"{k}={v:.3g}" for k, v in hyperparameters.items())
        print(f"trial {number:2d}: accuracy {accuracy:.3f} with {shown}")
        if accuracy > best_accuracy:
            best_accuracy, best_hyperparameters = accuracy, hyperparameters
        if submitted < num_trials:
            pending.append(launch(submitted))
            submitted += 1
    print(f"Best accuracy over {num_trials} trials was {best_accuracy:.3f}")
    print(f"with {best_hyperparameters}")
    return {
        "trials": len(consumed),
        "best_accuracy": best_accuracy,
        "best_hyperparameters": best_hyperparameters,
        "accuracies": accuracies,
        "finished_at": finished_at,
        "consumed": consumed,
        "wall_s": time.perf_counter() - start,
        "ok": len(consumed) == num_trials and best_accuracy > 0.9,
    }


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
