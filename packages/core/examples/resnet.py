"""Data-parallel ResNet training by weight averaging: one actor per (fraction of a) GPU, or CPUs.

Run from this folder (needs torch and rayfield-sgd, ``pip install packages/sgd``)::

    python resnet.py --num-workers 2                  # no GPU: two CPU actors
    python resnet.py --gpus-per-actor 0.5             # on a GPU node: two actors per GPU

A small residual network (He et al.; a 3x3 stem and two stages of one basic block each, 16 and 32
channels, batch norm, global average pooling) learns scikit-learn's 8x8 digits (1,797 images,
1,347 to train, 450 to test). When the cluster has GPUs the driver creates one
``ResNetTrainActor`` per ``gpus_per_actor`` share of each (``num_gpus=gpus_per_actor``); every
actor restricts itself to the GPUs ``rf.get_gpu_ids()`` names, through ``CUDA_VISIBLE_DEVICES``,
before it touches CUDA. Without GPUs it creates ``num_workers`` CPU actors. Each round the driver
puts the weights in the object store once; every actor loads them, takes ``steps`` SGD steps on its
own minibatches of the training set and returns its weights (batch-norm statistics included, as
``{name: numpy array}`` through rayfield-sgd's ``TorchVariables``); the driver averages them and
puts the mean for the next round.

Prints the test accuracy after every round (about 0.98 after 6 rounds; above 0.9 counts as ok).

Ports the ResNet example of Ray's example applications (TensorFlow's ResNet on CIFAR-10 with one
actor per GPU and averaged weights) with a small torch ResNet and the digits that ship with
scikit-learn in place of the CIFAR download.

Sources:
    He et al., "Deep Residual Learning for Image Recognition", CVPR 2016.
    McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data"
    (model averaging after local steps), AISTATS 2017.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np
import torch
from _script import run_script
from torch import nn

import rayfield as rf
from rayfield.sgd import TorchVariables

Weights = dict[str, np.ndarray]


def load_digit_images(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits as images: ``x float32[n, 1, 8, 8]`` in [0, 1], ``y int64[n]``; 25% to test."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    images = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    order = np.random.default_rng(seed).permutation(len(images))
    n_test = len(images) // 4
    test, train = order[:n_test], order[n_test:]
    return images[train], labels[train], images[test], labels[test]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm, added to the input (projected when shapes differ)."""

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """``float32[batch, 1, 8, 8]`` -> class logits ``float32[batch, 10]``."""

    def __init__(self, widths: tuple[int, ...] = (16, 32), num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks, in_channels = [], widths[0]
        for i, width in enumerate(widths):
            blocks.append(BasicBlock(in_channels, width, stride=1 if i == 0 else 2))
            in_channels = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


@rf.remote(num_cpus=1)
class ResNetTrainActor:
    """A replica of the model with its own copy of the training data; trains from given weights.

    Args:
        data: ``(x float32[n, 1, 8, 8], y int64[n])``, the training set.
        steps: SGD steps per ``compute_steps`` call.
    """

    def __init__(
        self, data: tuple[np.ndarray, np.ndarray], steps: int, batch_size: int, seed: int
    ) -> None:
        # Restrict torch to the GPUs this actor was given; only effective before CUDA starts.
        self.gpu_ids = rf.get_gpu_ids()
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in self.gpu_ids)
        cuda = bool(self.gpu_ids) and torch.cuda.is_available()
        self.device = torch.device("cuda:0" if cuda else "cpu")
        torch.set_num_threads(1)
        torch.manual_seed(0)  # the same initial weights in every replica
        self.x = torch.as_tensor(np.array(data[0])).to(self.device)
        self.y = torch.as_tensor(np.array(data[1])).to(self.device)
        self.model = ResNet().to(self.device)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4
        )
        self.variables = TorchVariables(self.model, include_buffers=True)
        self.steps, self.batch_size = steps, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def placement(self) -> tuple[list[int], str]:
        """``(gpu_ids, device)``: the GPUs the runtime gave this actor, and where it trains:
        ``"cuda:0"`` (the first of them) or ``"cpu"`` (none given, or CUDA unavailable)."""
        return self.gpu_ids, str(self.device)

    def get_weights(self) -> Weights:
        return self.variables.get_weights()

    def compute_steps(self, weights: Weights) -> Weights:
        """Loads ``weights``, takes ``steps`` SGD steps, returns the new weights and statistics."""
        self.variables.set_weights(weights)
        self.model.train()
        for _ in range(self.steps):
            rows = torch.randint(len(self.y), (self.batch_size,), generator=self.generator)
            rows = rows.to(self.device)
            self.optimizer.zero_grad()
            loss = nn.functional.cross_entropy(self.model(self.x[rows]), self.y[rows])
            loss.backward()
            self.optimizer.step()
        return self.variables.get_weights()


def test_accuracy(weights: Weights, x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy of a CPU copy of the model with ``weights`` (evaluation mode) on ``x``, ``y``."""
    model = ResNet()
    TorchVariables(model, include_buffers=True).set_weights(weights)
    model.eval()
    with torch.no_grad():
        predicted = model(torch.as_tensor(x)).argmax(dim=1).numpy()
    return float(np.mean(predicted == y))


def main(
    num_workers: int = 2,
    num_rounds: int = 6,
    steps: int = 20,
    batch_size: int = 64,
    gpus_per_actor: float = 1.0,
) -> dict[str, Any]:
    """Trains for ``num_rounds`` rounds of ``steps`` steps per actor, averaging after each.

    Args:
        num_workers: CPU actors when the cluster has no GPU.
        gpus_per_actor: the share of a GPU each actor takes when the cluster has GPUs (0.5: two
            actors per GPU).

    Raises:
        ValueError: ``gpus_per_actor`` is not in (0, 1], or ``num_workers`` < 1.

    Returns:
        ``accuracy`` (test set, final), ``accuracies`` (per round), ``actors``, ``gpu_ids`` and
        ``devices`` (each actor's, see ``ResNetTrainActor.placement``), ``wall_s``, and ``ok``
        (accuracy > 0.9).
    """
    if not 0 < gpus_per_actor <= 1 or num_workers < 1:
        raise ValueError(
            f"need 0 < gpus_per_actor <= 1 and num_workers >= 1, got {gpus_per_actor} and "
            f"{num_workers}"
        )
    start = time.perf_counter()
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load_digit_images()
    data = rf.put((x_train, y_train))
    num_gpus = rf.cluster_resources().get("GPU", 0.0)
    if num_gpus > 0:
        count = int(num_gpus / gpus_per_actor)
        actor_class = ResNetTrainActor.options(num_gpus=gpus_per_actor, num_cpus=0)
    else:
        count, actor_class = num_workers, ResNetTrainActor
    actors = [actor_class.remote(data, steps, batch_size, seed=i) for i in range(count)]
    placements = rf.get([actor.placement.remote() for actor in actors])
    for i, (gpu_ids, device) in enumerate(placements):
        print(f"actor {i}: GPUs {gpu_ids}, training on {device}")
    weight_id = rf.put(rf.get(actors[0].get_weights.remote()))
    accuracies = []
    for round_ in range(1, num_rounds + 1):
        all_weights = rf.get([actor.compute_steps.remote(weight_id) for actor in actors])
        mean_weights = {
            k: sum(weights[k] for weights in all_weights) / len(all_weights) for k in all_weights[0]
        }
        weight_id = rf.put(mean_weights)
        accuracies.append(test_accuracy(mean_weights, x_test, y_test))
        print(f"round {round_:2d}: test accuracy {accuracies[-1]:.3f}", flush=True)
    wall_s = time.perf_counter() - start
    print(f"final test accuracy {accuracies[-1]:.3f} after {num_rounds} rounds ({wall_s:.1f} s)")
    return {
        "accuracy": accuracies[-1],
        "accuracies": accuracies,
        "actors": count,
        "gpu_ids": [gpu_ids for gpu_ids, _ in placements],
        "devices": [device for _, device in placements],
        "wall_s": wall_s,
        "ok": accuracies[-1] > 0.9,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus-per-actor", type=float, default=1.0)
    parser.add_argument("--num-rounds", type=int, default=6)


def to_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"num_rounds": args.num_rounds, "gpus_per_actor": args.gpus_per_actor}


if __name__ == "__main__":
    sys.exit(run_script(main, __doc__ or "", add_arguments, to_kwargs))
