"""Shipping a torch model's weights, not the model: weight averaging and gradient averaging.

Run from this folder (needs torch and rayfield-sgd, ``pip install packages/sgd``)::

    python torch_weights.py --num-workers 2

Building a model is slow and pickling one is wasteful, so each process builds the same model
once and only its weights travel, as ``{name: numpy array}`` dicts read and written by
rayfield-sgd's ``TorchVariables`` (``get_weights`` / ``set_weights``; the reference's
``TensorFlowVariables``). The model is the reference's linear fit ``y = w * x + b`` with a mean
squared error and SGD with step 0.5, on ``num_workers`` batches of 100 points of
``y = 0.1 * x + 0.3``, one batch per actor. ``rf.remote(Network)`` turns the plain class into an
actor class; the data comes from a task with two return values (``num_return_vals=2``).

Two ways to train, each for 201 iterations:

* **weight averaging**: the driver puts the weights once (``rf.put``), every actor sets them and
  takes one SGD step on its batch, and the driver averages the returned weight dicts;
* **gradient averaging**: every actor returns its gradients at the put weights, the driver
  averages them, writes them into its own copy of the network's ``.grad`` fields and takes the
  optimizer's step there.

Prints the weights every 20 iterations (both runs reach ``w = 0.1``, ``b = 0.3``) and the test
loss before and after.

Ports "Using Ray with TensorFlow" of Ray's documentation (the complete example for weight
averaging and "How to Train in Parallel using Ray and Gradients") with torch in place of
TensorFlow 1 graphs.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from _common import run_standalone

import rayfield as rf
from rayfield.sgd import TorchVariables

Weights = dict[str, np.ndarray]


class Network:
    """The linear model ``y = w * x + b`` on one batch, with its optimizer and weight helper.

    Args:
        x, y: ``float64[n]`` inputs and targets of this network's batch.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        torch.manual_seed(0)  # every copy starts from the same weights
        torch.set_num_threads(1)
        self.x = torch.as_tensor(np.array(x), dtype=torch.float32)
        self.y = torch.as_tensor(np.array(y), dtype=torch.float32)
        self.model = torch.nn.Module()
        self.model.w = torch.nn.Parameter(torch.empty(1).uniform_(-1.0, 1.0))
        self.model.b = torch.nn.Parameter(torch.zeros(1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)
        self.variables = TorchVariables(self.model)

    def loss(self) -> torch.Tensor:
        """Mean squared error of the current weights on this network's batch."""
        prediction = self.model.w * self.x + self.model.b
        return torch.mean((prediction - self.y) ** 2)

    def step(self, weights: Weights) -> Weights:
        """Sets ``weights``, takes one SGD step on the batch, returns the new weights."""
        self.variables.set_weights(weights)
        self.optimizer.zero_grad()
        self.loss().backward()
        self.optimizer.step()
        return self.variables.get_weights()

    def compute_gradients(self, weights: Weights) -> list[np.ndarray]:
        """The loss's gradients at ``weights``, one array per parameter in the model's order."""
        self.variables.set_weights(weights)
        self.optimizer.zero_grad()
        self.loss().backward()
        return [p.grad.numpy().copy() for p in self.model.parameters() if p.grad is not None]

    def apply_gradients(self, gradients: list[np.ndarray]) -> None:
        """Takes one optimizer step with the given gradients (in the model's parameter order)."""
        for param, grad in zip(self.model.parameters(), gradients, strict=True):
            param.grad = torch.tensor(grad)
        self.optimizer.step()

    def get_weights(self) -> Weights:
        return self.variables.get_weights()

    def test_loss(self, weights: Weights) -> float:
        """The loss on this network's batch with ``weights``."""
        self.variables.set_weights(weights)
        with torch.no_grad():
            return float(self.loss())


@rf.remote(num_return_vals=2)
def generate_fake_x_y_data(num_data: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``x`` uniform in [0, 1) and ``y = 0.1 * x + 0.3``, both ``float64[num_data]``."""
    x = np.random.default_rng(seed).random(num_data)
    return x, x * 0.1 + 0.3


def mean_dict(dicts: list[Weights]) -> Weights:
    """Element-wise mean of dicts with the keys of the first one."""
    return {k: sum(d[k] for d in dicts) / len(dicts) for k in dicts[0]}


def train_by_weight_averaging(actors: list[Any], weights: Weights, num_iters: int) -> Weights:
    """Each iteration: every actor steps from the same put weights; the results are averaged."""
    for iteration in range(num_iters):
        # One put, so that every actor reads the same copy rather than one each.
        weights_id = rf.put(weights)
        weights = mean_dict(rf.get([actor.step.remote(weights_id) for actor in actors]))
        if iteration % 20 == 0:
            print(f"weight averaging, iteration {iteration:3d}: weights are {fmt(weights)}")
    return weights


def train_by_gradient_averaging(actors: list[Any], local: Network, num_iters: int) -> Weights:
    """Each iteration: every actor's gradient at the put weights; their mean is applied locally."""
    weights = local.get_weights()
    for iteration in range(num_iters):
        weights_id = rf.put(weights)
        gradients_list = rf.get([actor.compute_gradients.remote(weights_id) for actor in actors])
        mean_grads = [sum(g[i] for g in gradients_list) / len(gradients_list) for i in range(2)]
        local.apply_gradients(mean_grads)
        weights = local.get_weights()
        if iteration % 20 == 0:
            print(f"gradient averaging, iteration {iteration:3d}: weights are {fmt(weights)}")
    return weights


def fmt(weights: Weights) -> str:
    return ", ".join(f"{k}={float(v[0]):.4f}" for k, v in weights.items())


def main(num_workers: int = 2, num_iters: int = 201, batch_size: int = 100) -> dict[str, Any]:
    """Trains the linear model twice, by weight averaging then by gradient averaging.

    Args:
        num_workers: actors, each holding one batch of ``batch_size`` points.

    Returns:
        ``initial_loss`` and ``{averaging}_loss`` (test loss before and after, ``averaging``
        being ``weight`` or ``gradient``), ``{averaging}_w`` and ``{averaging}_b``, ``wall_s``,
        and ``ok``: both runs cut the test loss a hundredfold and end within 0.01 of
        ``w = 0.1``, ``b = 0.3``.
    """
    start = time.perf_counter()
    batch_ids = [generate_fake_x_y_data.remote(batch_size, seed=i) for i in range(num_workers)]
    x_test, y_test = rf.get(list(generate_fake_x_y_data.remote(batch_size, seed=num_workers)))
    remote_network = rf.remote(Network)
    actors = [remote_network.remote(x_id, y_id) for x_id, y_id in batch_ids]
    local = Network(x_test, y_test)
    initial = rf.get(actors[0].get_weights.remote())
    metrics: dict[str, Any] = {"initial_loss": local.test_loss(initial)}

    by_weights = train_by_weight_averaging(actors, initial, num_iters)
    local.variables.set_weights(initial)
    by_gradients = train_by_gradient_averaging(actors, local, num_iters)
    ok = True
    for name, weights in (("weight", by_weights), ("gradient", by_gradients)):
        loss = local.test_loss(weights)
        w, b = float(weights["w"][0]), float(weights["b"][0])
        metrics.update({f"{name}_loss": loss, f"{name}_w": w, f"{name}_b": b})
        ok = ok and loss < metrics["initial_loss"] / 100 and abs(w - 0.1) < 0.01
        ok = ok and abs(b - 0.3) < 0.01
        print(f"{name} averaging: test loss {metrics['initial_loss']:.4f} -> {loss:.2e}")
    metrics["wall_s"] = time.perf_counter() - start
    metrics["ok"] = ok
    return metrics


if __name__ == "__main__":
    run_standalone(main, __doc__ or "")
