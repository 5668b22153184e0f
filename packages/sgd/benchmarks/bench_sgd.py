"""rayfield-sgd benchmarks, as ratios against a peer measured in the same run.

1. Gradient all-reduce bandwidth (algorithm bandwidth: tensor bytes / seconds per
   all-reduce, the median over ``--reps``) for 1 MB .. 256 MB float32 tensors between two
   processes:
   - raw ``torch.distributed`` gloo between two spawned processes (the peer);
   - gloo inside two ``PyTorchTrainer`` replicas (the group the trainer forms);
   - ``DistributedSGD`` steps whose model is one parameter of that size and whose loss
     costs nothing, so a step is the gradient exchange plus zeroing the gradient and the
     SGD update: ``"simple"`` (the gloo all-reduce among the workers), ``"ps"`` and
     ``"simple"`` with ``allreduce="driver"`` (both through the object store).
2. ``DistributedSGD`` samples/s of ``"ps"`` against ``"simple"`` (all-reduce) as the
   model grows (an MLP on synthetic regression data, two workers).
3. Samples/s of digits-CNN training with 1 and 2 ``PyTorchTrainer`` replicas, start-up
   included, next to Ray Train's ``TorchTrainer`` on the same model and data, run by
   ``ray_train_peer.py`` under ``--ray-python`` (default: this Python when it imports
   ``ray``, else ``/tmp/raybench/bin/python`` when that exists).

    python bench_sgd.py [--max-mb 256] [--reps 5] [--epochs 5] [--skip-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rayfield
from rayfield.sgd import DistributedSGD, PyTorchTrainer, sgd_mse_optimizer
from rayfield.sgd.utils import find_free_port

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import digits_cnn  # noqa: E402

MB = 1 << 20


def _time_allreduce(size_bytes: int, reps: int) -> float:
    """Median seconds per gloo all_reduce of a float32 tensor (called on every rank),
    each after a barrier (as ``SGDWorker.time_allreduce``)."""
    tensor = torch.ones(size_bytes // 4)
    dist.all_reduce(tensor)  # warm-up (and connection set-up)
    times = []
    for _ in range(reps):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


def _median_step_s(sgd: DistributedSGD, reps: int) -> float:
    sgd.step(fetch_stats=True)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        sgd.step(fetch_stats=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def dsgd_exchange(size: int, strategy: str, allreduce: str, reps: int) -> tuple[float, float]:
    """Median seconds per DistributedSGD step of a free-loss model of ``size`` bytes, and
    (with a collective all-reduce, else NaN) the median seconds of worker 0's all-reduce
    of its gradient buffer, the step's own code (``SGDWorker._allreduce``), each after a
    barrier as in the raw gloo column."""
    elements = size // 4
    sgd = DistributedSGD(
        lambda w, d: FreeLossModel(elements),
        num_workers=2,
        strategy=strategy,
        allreduce=allreduce,
        grad_shard_bytes=max(MB, size // 4),
        checkpoint_freq=0,
    )
    try:
        sgd.warmup()
        step_s = _median_step_s(sgd, reps)
        if not sgd.foreach_worker(lambda w: w.world_size > 1)[0]:
            return step_s, float("nan")
        per_rank = sgd.foreach_worker(lambda w: w.time_allreduce(reps))
        return step_s, statistics.median(per_rank[0])
    finally:
        sgd.shutdown()


def _mlp(config: dict[str, Any]) -> torch.nn.Module:
    torch.manual_seed(0)
    width = config["width"]
    return torch.nn.Sequential(
        torch.nn.Linear(64, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 1),
    )


def _regression_data(config: dict[str, Any]) -> Any:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 64, generator=generator)
    return torch.utils.data.TensorDataset(x, x[:, :1] * 2 + 1)


def ps_vs_allreduce(widths: list[int], steps: int) -> list[tuple[int, float, float]]:
    """``(parameters, ps samples/s, simple samples/s)`` per MLP width (two workers,
    32 samples per worker a step, the median step time over ``steps``)."""
    rows = []
    for width in widths:
        rates = []
        for strategy in ("ps", "simple"):
            sgd = DistributedSGD(
                _mlp,
                num_workers=2,
                strategy=strategy,
                optimizer_creator=sgd_mse_optimizer,
                data_creator=_regression_data,
                batch_size=32,
                config={"width": width, "lr": 1e-3},
                checkpoint_freq=0,
            )
            try:
                rates.append(64 / _median_step_s(sgd, steps))
                params = sgd.for_model(lambda m: sum(p.numel() for p in m.parameters()))
            finally:
                sgd.shutdown()
        rows.append((params, rates[0], rates[1]))
    return rows


def rayfield_samples_per_s(num_replicas: int, epochs: int) -> float:
    """PyTorchTrainer's samples/s, with ``rayfield.init`` and the replicas' start-up
    inside the time, as ``ray.init`` and Ray Train's are on the peer's side."""
    start = time.perf_counter()
    rayfield.init(num_cpus=2)
    try:
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
    finally:
        rayfield.shutdown()
    return samples / (time.perf_counter() - start)


def default_ray_python() -> str | None:
    """This Python when it imports ray, else /tmp/raybench/bin/python when present."""
    try:
        import ray  # noqa: F401

        return sys.executable
    except ImportError:
        fallback = Path("/tmp/raybench/bin/python")
        return str(fallback) if fallback.exists() else None


def ray_train_samples_per_s(python: str, num_replicas: int, epochs: int) -> dict[str, Any]:
    """Run ``ray_train_peer.py`` under ``python``; its JSON result.

    Raises:
        RuntimeError: the peer exited non-zero (its last output lines are in the message).
    """
    done = subprocess.run(
        [
            python,
            str(HERE / "ray_train_peer.py"),
            "--replicas",
            str(num_replicas),
            "--epochs",
            str(epochs),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"exit {done.returncode}: {tail}")
    return dict(json.loads(lines[-1]))


def _machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.node()}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, load average {load:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="rayfield-sgd benchmarks")
    parser.add_argument("--max-mb", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--widths", default="64,256,1024,2048", help="MLP widths for ps vs simple")
    parser.add_argument("--ray-python", default=None, help="a Python that imports ray")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--only", choices=["allreduce", "size", "epoch"], default=None)
    args = parser.parse_args()
    sizes = [s * MB for s in (1, 4, 16, 64, 256) if s <= args.max_mb]
    widths = [int(w) for w in args.widths.split(",")]
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {_machine()}")

    raw = raw_gloo(sizes, args.reps) if args.only in (None, "allreduce") else []
    if args.only in (None, "allreduce", "size"):
        rayfield.init(num_cpus=2, object_store_memory=max(1 << 30, 6 * sizes[-1]))
        try:
            if args.only in (None, "allreduce"):
                _print_allreduce(sizes, raw, args.reps)
            if args.only in (None, "size"):
                print("\nDistributedSGD, 2 workers, MLP 64-w-w-1, samples/s (median step)")
                print(f"{'params':>10} {'ps':>9} {'simple':>9} {'ps/simple':>10}")
                for params, ps, simple in ps_vs_allreduce(widths, args.reps * 4):
                    print(f"{params:>10} {ps:9.0f} {simple:9.0f} {ps / simple:10.2f}")
        finally:
            rayfield.shutdown()
    if args.only in (None, "epoch"):
        rows = [(n, rayfield_samples_per_s(n, args.epochs)) for n in (1, 2)]
        _print_epochs(rows, args)


def _print_allreduce(sizes: list[int], raw: list[float], reps: int) -> None:
    in_trainer = trainer_gloo(sizes, reps)
    simple = [dsgd_exchange(s, "simple", "auto", reps) for s in sizes]
    ps = [dsgd_exchange(s, "ps", "auto", reps)[0] for s in sizes]
    driver = [dsgd_exchange(s, "simple", "driver", reps)[0] for s in sizes]
    print("\nGradient all-reduce between two processes, GB/s (tensor bytes / median time)")
    print(
        "every all-reduce column: rank 0's time, each call after a barrier; DSGD allreduce:"
        " DistributedSGD(strategy='simple')'s own all-reduce (with the division) of its"
        " workers' gradient buffers;"
        " the DSGD columns after it: whole steps (all-reduce or exchange, zeroing the"
        " gradient, the SGD update, the driver's calls)"
    )
    names = ["raw gloo", "trainer gloo", "DSGD allreduce", "simple step", "ps step", "driver step"]
    print(f"{'size':>8} " + " ".join(f"{n:>14} {'ratio':>6}" for n in names))
    for i, size in enumerate(sizes):
        times = (raw[i], in_trainer[i], simple[i][1], simple[i][0], ps[i], driver[i])
        gbps = [size / t / 1e9 for t in times]
        cells = [f"{g:14.2f} {g / gbps[0]:6.2f}" for g in gbps]
        print(f"{size // MB:>6}MB " + " ".join(cells))


def _print_epochs(rows: list[tuple[int, float]], args: Any) -> None:
    print(f"\nDigits CNN, {args.epochs} epochs, global batch 64, samples/s with start-up")
    python = None if args.skip_ray else (args.ray_python or default_ray_python())
    for n, ours in rows:
        peer = "skipped" if args.skip_ray else "no Python with ray (--ray-python)"
        if python is not None:
            try:
                theirs = ray_train_samples_per_s(python, n, args.epochs)
                rate = theirs["samples_per_s"]
                peer = f"Ray Train {theirs['ray']} {rate:8.0f}  ratio {ours / rate:5.2f}"
            except Exception as exc:  # the peer's failure is reported, not ours
                peer = f"Ray Train failed: {type(exc).__name__}: {exc}"
        print(f"{n} replica(s): rayfield {ours:8.0f}  {peer}")


if __name__ == "__main__":
    main()
