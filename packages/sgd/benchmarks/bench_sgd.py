"""rayfield-sgd benchmarks, as ratios against a peer measured in the same run.

1. Gradient all-reduce bandwidth (algorithm bandwidth: tensor bytes / seconds per
   all-reduce) for 1 MB .. 256 MB float32 tensors between two processes:
   - raw ``torch.distributed`` gloo between two spawned processes (the peer);
   - gloo inside two ``PyTorchTrainer`` replicas (the group the trainer forms);
   - ``DistributedSGD`` steps whose model is one parameter of that size and whose loss
     costs nothing, so a step is the exchange through the object store (``"ps"`` and
     ``"simple"``), plus flattening and applying the gradient.
2. Samples/s of digits-CNN training with 1 and 2 ``PyTorchTrainer`` replicas, start-up
   included, and Ray Train's ``TorchTrainer`` on the same model and data when ``ray`` is
   importable (``nox -s bench`` installs it).

    python bench_sgd.py [--max-mb 256] [--epochs 5] [--skip-ray]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rayfield
from rayfield.sgd import DistributedSGD, PyTorchTrainer
from rayfield.sgd.utils import find_free_port

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import digits_cnn  # noqa: E402

MB = 1 << 20


def _time_allreduce(size_bytes: int, reps: int) -> float:
    """Seconds per gloo all_reduce of a float32 tensor (called on every rank)."""
    tensor = torch.ones(size_bytes // 4)
    dist.all_reduce(tensor)  # warm-up (and connection set-up)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(tensor)
    return (time.perf_counter() - start) / reps


def _raw_gloo_rank(rank: int, address: str, sizes: list[int], reps: int, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=address, rank=rank, world_size=2, timeout=timedelta(seconds=120)
    )
    times = [_time_allreduce(size, reps) for size in sizes]
    if rank == 0:
        out.put(times)
    dist.destroy_process_group()


def raw_gloo(sizes: list[int], reps: int) -> list[float]:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    address = f"tcp://127.0.0.1:{find_free_port()}"
    procs = [
        ctx.Process(target=_raw_gloo_rank, args=(r, address, sizes, reps, queue)) for r in (0, 1)
    ]
    for p in procs:
        p.start()
    times = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return list(times)


def _one_parameter(config: dict[str, Any]) -> torch.nn.Module:
    module = torch.nn.Module()
    module.weight = torch.nn.Parameter(torch.zeros(config["elements"]))
    return module


class FreeLossModel:
    """One parameter of ``elements`` float32; the loss's gradient is a constant."""

    def __init__(self, elements: int) -> None:
        self.weight = torch.nn.Parameter(torch.zeros(elements))
        self.optimizer = torch.optim.SGD([self.weight], lr=1e-6)

    def get_loss(self) -> torch.Tensor:
        return self.weight.sum()

    def get_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer


def _no_data(config: dict[str, Any]) -> Any:
    return torch.utils.data.TensorDataset(torch.zeros(2, 1), torch.zeros(2, 1))


def trainer_gloo(sizes: list[int], reps: int) -> list[float]:
    """Seconds per all-reduce inside the two replicas of a PyTorchTrainer."""
    trainer = PyTorchTrainer(
        _one_parameter, _no_data, config={"elements": 1}, num_replicas=2, batch_size=2
    )
    try:
        per_rank = rayfield.get(
            [
                w.apply.remote(lambda _runner: [_time_allreduce(s, reps) for s in sizes])
                for w in trainer.workers
            ]
        )
    finally:
        trainer.shutdown()
    return list(per_rank[0])


def dsgd_exchange(size: int, strategy: str, reps: int) -> float:
    """Seconds per DistributedSGD step of a free-loss model of ``size`` bytes."""
    elements = size // 4
    sgd = DistributedSGD(
        lambda w, d: FreeLossModel(elements),
        num_workers=2,
        strategy=strategy,
        grad_shard_bytes=max(MB, size // 4),
    )
    try:
        sgd.warmup()
        sgd.step(fetch_stats=True)
        start = time.perf_counter()
        for _ in range(reps - 1):
            sgd.step()
        sgd.step(fetch_stats=True)
        return (time.perf_counter() - start) / reps
    finally:
        sgd.shutdown()


def rayfield_samples_per_s(num_replicas: int, epochs: int) -> float:
    start = time.perf_counter()
    trainer = PyTorchTrainer(
        digits_cnn.digits_cnn,
        digits_cnn.digits_data,
        optimizer_creator=digits_cnn.cross_entropy_adam,
        config={"lr": 3e-3},
        num_replicas=num_replicas,
        batch_size=64,
    )
    samples = 0
    try:
        for _ in range(epochs):
            samples += trainer.train()["num_samples"]
    finally:
        trainer.shutdown()
    return samples / (time.perf_counter() - start)


def ray_train_samples_per_s(num_replicas: int, epochs: int) -> float | None:
    """Ray Train's TorchTrainer on the same model, data and global batch (None without
    ray). Start-up included, as for rayfield."""
    try:
        import ray
        from ray.train import ScalingConfig
        from ray.train.torch import TorchTrainer, prepare_data_loader, prepare_model
    except ImportError:
        return None

    def loop(config: dict[str, Any]) -> None:
        import ray.train as ray_train
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

    start = time.perf_counter()
    ray.init(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": str(EXAMPLES)}})
    try:
        TorchTrainer(
            loop,
            train_loop_config={"epochs": epochs},
            scaling_config=ScalingConfig(num_workers=num_replicas, use_gpu=False),
        ).fit()
    finally:
        ray.shutdown()
    train, _ = digits_cnn.digits_data({})
    return epochs * len(train) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description="rayfield-sgd benchmarks")
    parser.add_argument("--max-mb", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args()
    sizes = [s * MB for s in (1, 4, 16, 64, 256) if s <= args.max_mb]

    raw = raw_gloo(sizes, args.reps)
    rayfield.init(num_cpus=2, object_store_memory=max(1 << 30, 6 * sizes[-1]))
    try:
        in_trainer = trainer_gloo(sizes, args.reps)
        ps = [dsgd_exchange(s, "ps", args.reps) for s in sizes]
        simple = [dsgd_exchange(s, "simple", args.reps) for s in sizes]
        print("\nGradient all-reduce between two processes, GB/s (tensor bytes / time)")
        print(
            f"{'size':>8} {'raw gloo':>9} {'trainer gloo':>13} {'ratio':>6} "
            f"{'DSGD ps':>8} {'ratio':>6} {'DSGD simple':>12} {'ratio':>6}"
        )
        for i, size in enumerate(sizes):
            gbps = [size / t / 1e9 for t in (raw[i], in_trainer[i], ps[i], simple[i])]
            print(
                f"{size // MB:>6}MB {gbps[0]:9.2f} {gbps[1]:13.2f} {gbps[1] / gbps[0]:6.2f} "
                f"{gbps[2]:8.2f} {gbps[2] / gbps[0]:6.2f} {gbps[3]:12.2f} {gbps[3] / gbps[0]:6.2f}"
            )
        rows = [(n, rayfield_samples_per_s(n, args.epochs)) for n in (1, 2)]
    finally:
        rayfield.shutdown()
    print(f"\nDigits CNN, {args.epochs} epochs, global batch 64, samples/s with start-up")
    for n, ours in rows:
        peer = "skipped" if args.skip_ray else "ray not installed"
        try:
            theirs = None if args.skip_ray else ray_train_samples_per_s(n, args.epochs)
        except Exception as exc:  # the peer's failure is reported, not ours
            theirs, peer = None, f"Ray Train failed: {type(exc).__name__}: {exc}"
        if theirs is not None:
            peer = f"Ray Train {theirs:8.0f}  ratio {ours / theirs:5.2f}"
        print(f"{n} replica(s): rayfield {ours:8.0f}  {peer}")


if __name__ == "__main__":
    main()
