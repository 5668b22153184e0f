"""Train a small CNN on scikit-learn's handwritten digits (8x8 images, shipped offline).

First with ``PyTorchTrainer`` on two replicas (a gloo process group, DistributedDataParallel,
each replica reading half of every epoch), then with ``DistributedSGD`` under both of its
strategies (sharded parameter server and all-reduce). Each run prints its epochs,
the test accuracy and samples per second, and the script exits non-zero when a run misses
the target accuracy (97% by default).

    python digits_cnn.py                       # on a local runtime (2 CPUs)
    python digits_cnn.py --address HOST:PORT [--temp-dir DIR]   # on a running cluster
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

# rayfield is imported where it is used, so that the model and the data (digits_data,
# digits_cnn, cross_entropy_adam) import without it: the benchmark's Ray Train peer
# runs them in an environment that has Ray and not rayfield.


def digits_data(config: dict[str, Any]) -> tuple[TensorDataset, TensorDataset]:
    """The digits as ``float32[n, 1, 8, 8]`` images in [0, 1] and int64 labels: 80% to
    train, 20% to test (stratified, fixed split)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )

    def dataset(x: np.ndarray, y: np.ndarray) -> TensorDataset:
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)))

    return dataset(x_train, y_train), dataset(x_test, y_test)


def digits_cnn(config: dict[str, Any] | None = None) -> torch.nn.Module:
    """Two 3x3 convolutions, a 2x2 max-pool and two dense layers: 10 class scores."""
    torch.manual_seed((config or {}).get("seed", 0))
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )


def cross_entropy_adam(model: torch.nn.Module, config: dict[str, Any]) -> tuple[Any, Any]:
    """``optimizer_creator``: cross-entropy loss and Adam at ``config["lr"]``."""
    return torch.nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters(), lr=config["lr"])


def test_accuracy(model: torch.nn.Module) -> float:
    """The fraction of the held-out digits that ``model`` classifies right."""
    _, test = digits_data({})
    x, y = test.tensors
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def train_with_trainer(epochs: int, num_replicas: int, lr: float = 3e-3) -> dict[str, Any]:
    """PyTorchTrainer: ``epochs`` epochs with a global batch of 64; the final stats."""
    from rayfield.sgd import PyTorchTrainer

    start = time.perf_counter()
    trainer = PyTorchTrainer(
        digits_cnn,
        digits_data,
        optimizer_creator=cross_entropy_adam,
        config={"lr": lr},
        num_replicas=num_replicas,
        batch_size=64,
    )
    try:
        samples = 0
        for _ in range(epochs):
            stats = trainer.train()
            val = trainer.validate()
            samples += stats["num_samples"]
            print(
                f"  epoch {stats['epoch']:2d}  loss {stats['train_loss']:.4f}  "
                f"test accuracy {val['val_accuracy']:.4f}  "
                f"{stats['samples_per_s']:8.0f} samples/s"
            )
        accuracy = test_accuracy(trainer.get_model())
    finally:
        trainer.shutdown()
    elapsed = time.perf_counter() - start
    return {"accuracy": accuracy, "samples_per_s": samples / elapsed, "seconds": elapsed}


def train_with_distributed_sgd(strategy: str, steps: int, lr: float = 3e-3) -> dict[str, Any]:
    """DistributedSGD on two workers (one replica each, 32 samples per replica a step)."""
    from rayfield.sgd import DistributedSGD

    start = time.perf_counter()
    sgd = DistributedSGD(
        lambda worker_idx, device_idx: digits_cnn(),
        num_workers=2,
        devices_per_worker=1,
        strategy=strategy,
        grad_shard_bytes=64 * 1024,  # several parameter-server shards for this model
        optimizer_creator=cross_entropy_adam,
        data_creator=digits_data,
        batch_size=32,
        config={"lr": lr},
    )
    try:
        sgd.warmup()
        for i in range(steps):
            report = (i + 1) % 100 == 0
            loss = sgd.step(fetch_stats=report)
            if report and loss is not None:
                print(f"  step {i + 1:4d}  loss {loss:.4f}")
        accuracies = sgd.foreach_model(test_accuracy)
        if len(set(accuracies)) != 1:
            raise RuntimeError(f"models out of sync: {accuracies}")
    finally:
        sgd.shutdown()
    elapsed = time.perf_counter() - start
    return {"accuracy": accuracies[0], "samples_per_s": steps * 64 / elapsed, "seconds": elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", help="a running cluster's HOST:PORT (default: local)")
    parser.add_argument(
        "--temp-dir", help="with --address: the --temp-dir the cluster was started with"
    )
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--steps", type=int, default=300, help="DistributedSGD steps")
    parser.add_argument("--num-replicas", type=int, default=2)
    parser.add_argument("--target", type=float, default=0.97)
    parser.add_argument("--skip-dsgd", action="store_true", help="only PyTorchTrainer")
    args = parser.parse_args(argv)
    import rayfield

    if args.address:
        rayfield.init(address=args.address, temp_dir=args.temp_dir)
    else:
        rayfield.init(num_cpus=2)
    results = {}
    try:
        print(f"PyTorchTrainer, {args.num_replicas} replicas, {args.epochs} epochs")
        results["PyTorchTrainer"] = train_with_trainer(args.epochs, args.num_replicas)
        if not args.skip_dsgd:
            for strategy in ("ps", "simple"):
                print(f"DistributedSGD, strategy={strategy!r}, {args.steps} steps")
                results[f"DistributedSGD({strategy})"] = train_with_distributed_sgd(
                    strategy, args.steps
                )
    finally:
        rayfield.shutdown()
    ok = True
    for name, r in results.items():
        verdict = "ok" if r["accuracy"] >= args.target else f"BELOW {args.target:.2f}"
        ok &= r["accuracy"] >= args.target
        print(
            f"{name:24s} test accuracy {r['accuracy']:.4f} ({verdict})  "
            f"{r['samples_per_s']:8.0f} samples/s over {r['seconds']:.1f} s (start-up included)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
