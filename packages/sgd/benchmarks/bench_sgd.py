"""rayfield-sgd benchmarks, as ratios against a peer measured in the same run.

1. Gradient all-reduce bandwidth (algorithm bandwidth: tensor bytes / seconds per
   all-reduce) for 1 MB .. 256 MB float32 tensors between two processes, timed in
   rounds of ``--reps`` calls, the all-reduce columns in turn within a round so that the
   machine's load hits them alike. ``--rounds`` defaults to 30 rounds for 1 and 4 MB, 10
   for 16 MB and 3 above: a 4 MB all-reduce takes a few milliseconds, so one scheduler
   delay moves a round's median by 2x (round medians of raw gloo alone ranged 0.81-1.80
   GB/s in a 3-round run on an idle machine) and only many rounds give a stable ratio:
   - raw ``torch.distributed`` gloo between two spawned processes (the peer), which stay
     up for the whole run in the bench's session, as rayfield's workers stay in their
     node's session (here the driver's); and the same pair with each rank in a session of
     its own (``rawos``, where rayfield's workers were before 2026-11-26 17:00, for
     reference);
   - gloo inside two ``PyTorchTrainer`` replicas (the group the trainer forms);
   - ``DistributedSGD(strategy="simple")``'s own all-reduce of its workers' gradient
     buffers (``SGDWorker.time_allreduce``);
   - a ``DistributedDataParallel`` backward pass in the trainer's replicas (the trainer's
     own ``wrap_ddp``) over parameters of that size in all: what training pays for the
     gradient exchange, DDP's reducer included;
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

    python bench_sgd.py [--max-mb 256] [--reps 5] [--rounds N] [--epochs 5] [--skip-ray]
                        [--skip-steps] [--only allreduce|size|epoch]
                        [--columns rawos,trainer,dsgd,ddp]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
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
# The all-reduce columns besides the peer ("raw"), with their titles.
COLUMNS = {"rawos": "rawos", "trainer": "trainer", "dsgd": "DSGD", "ddp": "DDP"}


def _time_allreduce(size_bytes: int, reps: int) -> list[float]:
    """Seconds of ``reps`` gloo all_reduces of a float32 tensor (called on every rank),
    each after a barrier (as ``SGDWorker.time_allreduce``)."""
    tensor = torch.ones(size_bytes // 4)
    dist.all_reduce(tensor)  # warm-up (and connection set-up)
    times = []
    for _ in range(reps):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        times.append(time.perf_counter() - start)
    return times


def _raw_gloo_rank(
    rank: int, address: str, jobs: Any, out: Any, own_session: bool, parent: int
) -> None:
    """One rank of a raw pair: times ``(size, reps)`` jobs until it reads None. The rank
    leads a process group of its own, as rayfield's worker pool starts every worker; with
    ``own_session`` it leads a session of its own instead. It also stops when the bench
    process ``parent`` is gone (killed), since a rank outside the bench's group outlives
    a Ctrl-C."""
    if own_session:
        os.setsid()
    else:
        os.setpgid(0, 0)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=address, rank=rank, world_size=2, timeout=timedelta(seconds=600)
    )
    while True:
        try:
            job = jobs.get(timeout=5)
        except queue.Empty:
            if os.getppid() != parent:
                break
            continue
        if job is None:
            break
        times = _time_allreduce(*job)
        if rank == 0:
            out.put(times)
    dist.destroy_process_group()


class RawGloo:
    """Two spawned processes in a plain gloo group (no rayfield) that stay up for the
    whole run, so their all-reduces can be timed in turn with the others'.

    Args:
        own_session: each rank runs in a session of its own (rayfield's workers did
            until 2026-11-26 17:00). With False (the peer) both ranks stay in the
            bench's session, as rayfield's workers stay in their node's. Where the
            kernel groups CPU time by session (``sched_autogroup``, the default of most
            Linux desktops and of this VM), two ranks in one session hand the CPU to
            each other at every gloo segment without competing with the other
            sessions' tasks, which on a loaded machine made them ~2.5x faster than the
            same pair in two sessions (see the README).
    """

    def __init__(self, own_session: bool = False) -> None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        ctx = mp.get_context("spawn")
        self.jobs = [ctx.Queue(), ctx.Queue()]
        self.out = ctx.Queue()
        address = f"tcp://127.0.0.1:{find_free_port()}"
        self.procs = [
            ctx.Process(
                target=_raw_gloo_rank,
                args=(r, address, self.jobs[r], self.out, own_session, os.getpid()),
            )
            for r in (0, 1)
        ]
        for p in self.procs:
            p.start()

    def time(self, size: int, reps: int) -> list[float]:
        """Rank 0's seconds per all-reduce of ``size`` bytes, ``reps`` times."""
        for jobs in self.jobs:
            jobs.put((size, reps))
        return list(self.out.get(timeout=600))

    def close(self) -> None:
        for jobs in self.jobs:
            jobs.put(None)
        for p in self.procs:
            p.join(timeout=60)


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


def _median_step_s(sgd: DistributedSGD, reps: int) -> float:
    sgd.step(fetch_stats=True)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        sgd.step(fetch_stats=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _free_loss_sgd(size: int, strategy: str, allreduce: str) -> DistributedSGD:
    """Two workers whose model is one parameter of ``size`` bytes and whose loss costs
    nothing, so a step is the gradient exchange, zeroing the gradient and the update."""
    elements = size // 4
    sgd = DistributedSGD(
        lambda w, d: FreeLossModel(elements),
        num_workers=2,
        strategy=strategy,
        allreduce=allreduce,
        grad_shard_bytes=max(MB, size // 4),
        checkpoint_freq=0,
    )
    sgd.warmup()
    return sgd


def step_s(size: int, strategy: str, allreduce: str, reps: int) -> float:
    """Median seconds per DistributedSGD step of a free-loss model of ``size`` bytes."""
    sgd = _free_loss_sgd(size, strategy, allreduce)
    try:
        return _median_step_s(sgd, reps)
    finally:
        sgd.shutdown()


class GradientModel(torch.nn.Module):
    """Parameters of ``size_bytes`` float32 in all, at most 4 MB each (a 16 MB model has
    four), whose forward is ``x * sum(p.sum())``: its backward writes a gradient of ones
    into every parameter and costs one pass over them."""

    def __init__(self, size_bytes: int) -> None:
        super().__init__()
        n, per = size_bytes // 4, MB
        self.chunks = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(min(per, n - i))) for i in range(0, n, per)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.stack([p.sum() for p in self.chunks]).sum()


def _time_ddp_backward(runner: Any, size: int, reps: int) -> list[float]:
    """Seconds of ``reps`` backward passes of a ``GradientModel(size)`` wrapped by the
    trainer's own ``wrap_ddp`` in a replica (called on every replica), each after the
    forward, the gradients set to None (``zero_grad``'s default) and a barrier: the
    gradients' production, DDP's bucket copies and its bucketed all-reduces. The model
    is built (and warmed up by one backward) once per size and kept on the runner."""
    from rayfield.sgd.pytorch.runner import wrap_ddp

    cache = runner.__dict__.setdefault("_bench_ddp", {})
    if size not in cache:
        cache.clear()
        cache[size] = wrap_ddp(GradientModel(size), torch.device("cpu"))
        cache[size](torch.ones(())).backward()
    model = cache[size]
    times = []
    for _ in range(reps):
        for p in model.parameters():
            p.grad = None
        loss = model(torch.ones(()))
        dist.barrier()
        start = time.perf_counter()
        loss.backward()
        times.append(time.perf_counter() - start)
    return times


def allreduce_rounds(
    size: int,
    reps: int,
    rounds: int,
    raws: dict[str, RawGloo],
    trainer: Any,
    columns: frozenset[str] = frozenset(COLUMNS),
) -> Any:
    """``rounds`` rounds, each timing ``reps`` all-reduces of ``size`` bytes (rank 0, each
    after a barrier) by: each raw gloo pair in ``raws``, plain gloo inside the
    PyTorchTrainer's two replicas, DistributedSGD(strategy="simple")'s own all-reduce of
    its workers' gradient buffers (``SGDWorker.time_allreduce``), and the trainer's
    ``DistributedDataParallel`` backward over ``size`` bytes of gradient
    (``_time_ddp_backward``); of the last four only those named in ``columns``. They
    take turns (the order rotates every round), so machine load hits them alike.

    Returns:
        ``({"raw": [...], ..., "trainer": [...], "dsgd": [...], "ddp": [...]}`` of
        per-round median seconds, the median seconds of a whole ``"simple"`` step).
    """
    sgd = _free_loss_sgd(size, "simple", "auto")
    try:
        simple_step = _median_step_s(sgd, reps)

        def in_trainer() -> float:
            per_rank = rayfield.get(
                [w.apply.remote(lambda _r: _time_allreduce(size, reps)) for w in trainer.workers]
            )
            return statistics.median(per_rank[0])

        def in_dsgd() -> float:
            per_rank = sgd.foreach_worker(lambda w: w.time_allreduce(reps))
            return statistics.median(per_rank[0])

        def in_ddp() -> float:
            per_rank = rayfield.get(
                [
                    w.apply.remote(lambda r: _time_ddp_backward(r, size, reps))
                    for w in trainer.workers
                ]
            )
            return statistics.median(per_rank[0])

        timers: dict[str, Callable[[], float]] = {
            name: (lambda raw=raw: statistics.median(raw.time(size, reps)))
            for name, raw in raws.items()
        }
        timers.update(trainer=in_trainer, dsgd=in_dsgd, ddp=in_ddp)
        timers = {n: t for n, t in timers.items() if n == "raw" or n in columns}
        names = list(timers)
        out: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            turn = r % len(names)
            for name in names[turn:] + names[:turn]:
                out[name].append(timers[name]())
        return out, simple_step
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
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="all-reduce rounds per size (default: 30 up to 4 MB, 10 at 16 MB, 3 above)",
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--widths", default="64,256,1024,2048", help="MLP widths for ps vs simple")
    parser.add_argument("--ray-python", default=None, help="a Python that imports ray")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-steps", action="store_true", help="no ps and driver step columns")
    parser.add_argument("--only", choices=["allreduce", "size", "epoch"], default=None)
    parser.add_argument(
        "--columns",
        default=",".join(COLUMNS),
        help="all-reduce columns timed besides raw (any of rawos,trainer,dsgd,ddp)",
    )
    args = parser.parse_args()
    args.columns = frozenset(c for c in args.columns.split(",") if c)
    if not args.columns <= set(COLUMNS):
        parser.error(f"--columns: unknown {sorted(args.columns - set(COLUMNS))}")
    sizes = [s * MB for s in (1, 4, 16, 64, 256) if s <= args.max_mb]
    widths = [int(w) for w in args.widths.split(",")]
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {_machine()}")

    if args.only in (None, "allreduce", "size"):
        # 4 logical CPUs: the trainer's two replicas stay up (idle) while the
        # DistributedSGD workers they take turns with run.
        rayfield.init(num_cpus=4, object_store_memory=max(1 << 30, 6 * sizes[-1]))
        try:
            if args.only in (None, "allreduce"):
                _print_allreduce(sizes, args)
            if args.only in (None, "size"):
                print("\nDistributedSGD, 2 workers, MLP 64-w-w-1, samples/s (median step)")
                print(f"{'params':>10} {'ps':>9} {'simple':>9} {'ps/simple':>10}")
                for params, ps, simple in ps_vs_allreduce(widths, args.reps * 4):
                    print(f"{params:>10} {ps:9.0f} {simple:9.0f} {ps / simple:10.2f}")
        finally:
            rayfield.shutdown()
        print(f"(load average at the end {os.getloadavg()[0]:.1f})")
    if args.only in (None, "epoch"):
        rows = [(n, rayfield_samples_per_s(n, args.epochs)) for n in (1, 2)]
        _print_epochs(rows, args)


def rounds_for(size: int, rounds: int | None) -> int:
    """All-reduce rounds for ``size`` bytes: ``rounds`` when given, else 30 up to 4 MB,
    10 up to 16 MB and 3 above (small all-reduces need many rounds for a stable median)."""
    if rounds is not None:
        return rounds
    return 30 if size <= 4 * MB else 10 if size <= 16 * MB else 3


def _rounds_text(sizes: list[int], rounds: int | None) -> str:
    return ", ".join(f"{rounds_for(s, rounds)} rounds at {s // MB} MB" for s in sizes)


def _print_allreduce(sizes: list[int], args: Any) -> None:
    reps = args.reps
    print(
        "\nGradient all-reduce between two processes, GB/s (tensor bytes / median time)."
        f"\n{_rounds_text(sizes, args.rounds)} of {reps} calls per column, the columns in turn"
        " (rank 0's time, each call after a barrier). raw: plain gloo between two spawned"
        " processes in the bench's session, as rayfield's workers are in their node's (the"
        " peer), its median and [min-max] of the round medians; rawos: the same with each"
        " rank in a session of its own; trainer: plain gloo inside PyTorchTrainer's two replicas;"
        " DSGD: DistributedSGD(strategy='simple')'s own all-reduce of its workers' gradient"
        " buffers; DDP: a backward pass of DistributedDataParallel (the trainer's wrap_ddp)"
        " over parameters of that size in all (gradients, bucket copies, bucketed"
        " all-reduces). ratio: the median over rounds of (column / raw of the same round)."
        " Step columns: whole DistributedSGD steps (all-reduce or exchange, zeroing the"
        " gradient, the SGD update, the driver's calls) against the raw median."
    )
    raws = {"raw": RawGloo()}
    if "rawos" in args.columns:
        raws["rawos"] = RawGloo(own_session=True)
    trainer = None
    if args.columns & {"trainer", "ddp"}:
        trainer = PyTorchTrainer(
            _one_parameter, _no_data, config={"elements": 1}, num_replicas=2, batch_size=2
        )
    rows = []
    try:
        for size in sizes:
            rounds_s, simple_step = allreduce_rounds(
                size, reps, rounds_for(size, args.rounds), raws, trainer, args.columns
            )
            if args.skip_steps:
                steps = [simple_step]
            else:
                steps = [
                    simple_step,
                    step_s(size, "ps", "auto", reps),
                    step_s(size, "simple", "driver", reps),
                ]
            rows.append((size, rounds_s, steps))
    finally:
        if trainer is not None:
            trainer.shutdown()
        for raw in raws.values():
            raw.close()
    step_names = ["simple step", "ps step", "driver step"][: len(rows[0][2]) if rows else 0]
    columns = {n: title for n, title in COLUMNS.items() if n in args.columns}
    header = f"{'size':>6} {'raw':>6} {'[min-max]':>11}"
    header += "".join(f" {title:>7} {'ratio':>6}" for title in columns.values())
    header += "".join(f" {n:>12} {'ratio':>6}" for n in step_names)
    print(header)
    for size, per_round, steps in rows:
        gb = {k: [size / t / 1e9 for t in v] for k, v in per_round.items()}
        raw_gb = statistics.median(gb["raw"])
        line = f"{size // MB:>4}MB {raw_gb:6.2f} [{min(gb['raw']):4.2f}-{max(gb['raw']):4.2f}]"
        for name in columns:
            ratio = statistics.median(c / r for c, r in zip(gb[name], gb["raw"]))
            line += f" {statistics.median(gb[name]):7.2f} {ratio:6.2f}"
        for t in steps:
            line += f" {size / t / 1e9:12.2f} {size / t / 1e9 / raw_gb:6.2f}"
        print(line)


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
