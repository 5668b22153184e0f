"""The Ray Train side of ``bench_sgd.py``: the digits CNN with Ray Train's ``TorchTrainer``.

Run by ``bench_sgd.py`` as a subprocess, under any Python that imports ``ray`` (it needs
no rayfield): the same model, data, optimizer and global batch as the rayfield run, one
process per replica on a local Ray with 2 CPUs. Prints one JSON line:
``{"replicas": N, "epochs": E, "samples": S, "seconds": T, "samples_per_s": S / T}``, with
``ray.init`` and the workers' start-up inside ``T``, as on the rayfield side.

    python ray_train_peer.py --replicas 2 --epochs 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import digits_cnn  # noqa: E402


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: ``config["epochs"]`` epochs of its shard of the digits."""
    import ray.train as ray_train
    import torch
    from ray.train.torch import prepare_data_loader, prepare_model
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    train, _ = digits_cnn.digits_data({})
    model = prepare_model(digits_cnn.digits_cnn())
    loss, optimizer = digits_cnn.cross_entropy_adam(model, {"lr": 3e-3})
    world = ray_train.get_context().get_world_size()
    loader = prepare_data_loader(DataLoader(train, batch_size=64 // world, shuffle=True))
    for epoch in range(config["epochs"]):
        if world > 1:
            loader.sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss(model(x), y).backward()
            optimizer.step()
        ray_train.report({"epoch": epoch})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--storage", default="/tmp/rayfield-sgd-bench-ray")
    args = parser.parse_args()

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    start = time.perf_counter()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(EXAMPLES)}},
    )
    try:
        TorchTrainer(
            train_loop,
            train_loop_config={"epochs": args.epochs},
            scaling_config=ScalingConfig(num_workers=args.replicas, use_gpu=False),
            run_config=RunConfig(storage_path=args.storage),
        ).fit()
    finally:
        ray.shutdown()
    seconds = time.perf_counter() - start
    train, _ = digits_cnn.digits_data({})
    samples = args.epochs * len(train)
    print(
        json.dumps(
            {
                "replicas": args.replicas,
                "epochs": args.epochs,
                "samples": samples,
                "seconds": seconds,
                "samples_per_s": samples / seconds,
                "ray": ray.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
