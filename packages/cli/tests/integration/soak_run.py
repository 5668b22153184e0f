"""A soak: mixed work on two nodes for many minutes, each rayfield process's memory sampled.

Two nodes of one CPU on this machine. Round after round, a driver on the head runs
tasks (small, and ones that make 100 MB arrays read on the other node), calls to actors
on both nodes (new ones made and dropped every few rounds), and puts and drops 100 MB
objects. Once a minute it samples every long-lived process of the cluster, each on its
own: each node process and the GCS (private memory, ``RssAnon``: the store's shared
arena left out; open file descriptors), and each node's workers (how many, and each
one's private memory). The driver (this process) is not sampled.

After the warm-up, the last sample must match the first: no node or GCS process grew
its private memory by more than ``--tolerance`` or its fds by more than ``--fd-slack``,
no node has more than ``--worker-slack`` workers more, and no node's largest worker grew
by more than ``--tolerance``. The processes are checked one by one because their sum
is not steady: actor workers come and go every few seconds, so a node's total jumped by
a whole worker (10 to 20 MB) with the moment of the sample. The warm-up lasts
``--warmup-min`` minutes and ``--warmup-rounds`` rounds at least, by default the rounds
that fill the GCS's task-event ring (``MAX_TASK_EVENTS`` events, one for each task and
actor call, about 43 MB of the GCS's memory); before that, the GCS grows by design.
``--leak-kb-per-round`` makes an actor that lives through the run keep that much more
memory every round, to see the check fail on a leak.

``nox -s chaos`` runs it for 30 minutes; run it directly for another length:
``python soak_run.py --minutes 5``. Exits 1 when a process grew, or work failed.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from clusterutil import start_nodes  # noqa: E402

import rayfield as rf  # noqa: E402
from rayfield._private.gcs.service import MAX_TASK_EVENTS  # noqa: E402
from rayfield.util.cluster import rayfield_processes, stop_all  # noqa: E402

MB = 1 << 20
# Task events each round leaves in the GCS: one per task and actor call of `_round` (200
# small tasks, make_big, two read_big, two Keeper calls; actors made every tenth round
# add a few more, so the ring fills no later than these rounds say).
EVENTS_PER_ROUND = 205


@rf.remote
def small(i: int) -> int:
    return i + 1


@rf.remote(resources={"x": 1})
def make_big(seed: int) -> np.ndarray:
    return np.full(100 * MB // 8, seed, dtype=np.float64)


@rf.remote
def read_big(a: np.ndarray) -> float:
    return float(a[0] + a[-1])


@rf.remote(num_cpus=0)
class Keeper:
    def __init__(self) -> None:
        self.n = 0

    def add(self, k: int) -> int:
        self.n += k
        return self.n


@rf.remote(num_cpus=0)
class Hoarder:
    """A leak on purpose (``--leak-kb-per-round``): keeps everything it is given."""

    def __init__(self) -> None:
        self.kept: list[bytes] = []

    def keep(self, kb: int) -> int:
        self.kept.append(b"x" * (kb << 10))
        return len(self.kept)


def _anon(proc: psutil.Process) -> int:
    """The process's private anonymous memory in bytes (``RssAnon``: heap, stacks), which
    leaks grow; the object store's shared-memory pages (``RssShmem``) are left out: they
    are the store's fixed arena, resident once touched."""
    with open(f"/proc/{proc.pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(frozen=True)
class Usage:
    """One long-lived process of the cluster (a node, the GCS) at one sample.

    Attributes:
        anon: its private memory (:func:`_anon`), bytes.
        fds: its open file descriptors.
        workers: a node's workers' private memory, bytes each (empty for the GCS).
    """

    anon: int
    fds: int
    workers: tuple[int, ...] = field(default=())

    def describe(self) -> str:
        text = f"{self.anon / MB:.0f} MB, {self.fds} fds"
        if self.workers:
            text += f", workers {[round(w / MB) for w in self.workers]} MB"
        return text


def _role(cmd: list[str]) -> str:
    """A rayfield process's name in the samples: the node's session, or what it is."""
    if "rayfield._private.node_manager.node_main" in cmd:
        return cmd[cmd.index("--session-dir") + 1]
    return "gcs" if "rayfield._private.gcs.server" in cmd else "dashboard"


def _sample(temp_dir: Path) -> dict[str, Usage]:
    """Each node, GCS and dashboard process under ``temp_dir`` -> its :class:`Usage`."""
    out = {}
    for proc in rayfield_processes(temp_dir):
        try:
            name = _role(proc.cmdline())
            workers = []
            for child in proc.children(recursive=True):
                try:
                    workers.append(_anon(child))
                except OSError:  # exited meanwhile: an actor's worker, gone with it
                    continue
            out[name] = Usage(_anon(proc), proc.num_fds(), tuple(sorted(workers)))
        except (psutil.Error, OSError):
            continue
    return out


def _round(n: int, keepers: list[rf.ActorHandle]) -> None:
    assert rf.get([small.remote(i) for i in range(200)]) == [i + 1 for i in range(200)]
    big = make_big.remote(n)
    assert rf.get(read_big.remote(big), timeout=120) == 2.0 * n
    put = rf.put(np.ones(100 * MB // 8))
    assert rf.get(read_big.remote(put), timeout=120) == 2.0
    del big, put
    assert rf.get([k.add.remote(1) for k in keepers], timeout=60)


def soak(
    temp_dir: Path, minutes: float, warmup_min: float, warmup_rounds: int, leak_kb: int = 0
) -> list[dict[str, Usage]]:
    """Run the soak; returns the samples (one a minute, the first after warm-up first).
    The warm-up lasts ``warmup_min`` minutes and ``warmup_rounds`` rounds at least;
    ``leak_kb``: a :class:`Hoarder` keeps this many more KiB every round."""
    temp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    address = start_nodes(temp_dir, count=2, resources='{"x": 10}')
    rf.init(address=address, temp_dir=str(temp_dir))
    samples: list[dict[str, Usage]] = []
    try:
        start = time.monotonic()
        next_sample = None
        keepers = [Keeper.remote() for _ in range(2)]
        hoarder = Hoarder.remote() if leak_kb else None
        n = 0
        while time.monotonic() - start < minutes * 60:
            n += 1
            _round(n, keepers)
            if hoarder is not None:
                rf.get(hoarder.keep.remote(leak_kb), timeout=60)
            if n % 10 == 0:  # actors come and go
                keepers = [Keeper.remote() for _ in range(2)]
            elapsed = time.monotonic() - start
            if next_sample is None and elapsed >= warmup_min * 60 and n >= warmup_rounds:
                print(f"warm-up over at {elapsed / 60:.1f} min, round {n}", flush=True)
                next_sample = time.monotonic()
            if next_sample is not None and time.monotonic() >= next_sample:
                samples.append(_sample(temp_dir))
                parts = "; ".join(f"{k[-12:]}: {u.describe()}" for k, u in samples[-1].items())
                print(f"{elapsed / 60:5.1f} min, round {n}: {parts}", flush=True)
                next_sample += 60
    finally:
        rf.shutdown()
        stop_all(5.0, temp_dir=temp_dir)
    return samples


def growth(
    samples: list[dict[str, Usage]], tolerance: float, fd_slack: int, worker_slack: int
) -> list[str]:
    """What grew from the first sample to the last (empty: flat), process by process:
    each node's and the GCS's private memory (more than ``tolerance``, a fraction) and
    fds (more than ``fd_slack``), each node's number of workers (more than
    ``worker_slack``) and its largest worker's private memory (more than ``tolerance``)."""
    if len(samples) < 2:
        return ["fewer than two samples after warm-up: soak longer"]
    problems = []
    for name, first in samples[0].items():
        last = samples[-1].get(name)
        if last is None:
            problems.append(f"{name} is gone")
            continue
        if last.anon > first.anon * (1 + tolerance):
            problems.append(f"{name}: RSS {first.anon / MB:.0f} -> {last.anon / MB:.0f} MB")
        if last.fds > first.fds + fd_slack:
            problems.append(f"{name}: fds {first.fds} -> {last.fds}")
        if len(last.workers) > len(first.workers) + worker_slack:
            problems.append(f"{name}: workers {len(first.workers)} -> {len(last.workers)}")
        big0, big1 = max(first.workers, default=0), max(last.workers, default=0)
        if big1 > big0 * (1 + tolerance):
            problems.append(f"{name}: largest worker {big0 / MB:.0f} -> {big1 / MB:.0f} MB")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-min", type=float, default=3.0)
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=math.ceil(MAX_TASK_EVENTS / EVENTS_PER_ROUND),
        help="rounds the warm-up lasts at least (default: those that fill the GCS's "
        "task-event ring; fewer: the GCS may still grow by design)",
    )
    parser.add_argument("--tolerance", type=float, default=0.25)
    parser.add_argument("--fd-slack", type=int, default=16)
    parser.add_argument(
        "--worker-slack",
        type=int,
        default=4,
        help="workers a node may have more at the end (actors come and go: 2 to 4 seen)",
    )
    parser.add_argument(
        "--leak-kb-per-round", type=int, default=0, help="leak on purpose, to see the check fail"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rf-soak-") as d:
        samples = soak(
            Path(d), args.minutes, args.warmup_min, args.warmup_rounds, args.leak_kb_per_round
        )
    problems = growth(samples, args.tolerance, args.fd_slack, args.worker_slack)
    for p in problems:
        print("GREW:", p, flush=True)
    print("flat" if not problems else "not flat", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
