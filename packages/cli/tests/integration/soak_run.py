"""A soak: mixed work on two nodes for many minutes, each node's memory and fds sampled.

Two nodes of one CPU on this machine. Round after round, a driver on the head runs
tasks (small, and ones that make 100 MB arrays read on the other node), calls to actors
on both nodes (new ones made and dropped every few rounds), and puts and drops 100 MB
objects. Once a minute it samples each node's private memory (``RssAnon`` of the node
and its workers: the store's shared arena left out) and open file descriptors. After a
warm-up (``--warmup-min``), the last sample of each must stay within ``--tolerance`` of
the first sample after warm-up, and fds must not grow by more than ``--fd-slack``: flat,
no leak. It stops by itself after ``--minutes``.

``nox -s chaos`` runs it for 30 minutes; run it directly for another length:
``python soak_run.py --minutes 5``. Exits 1 when a node's RSS or fds grew, or work failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from chaos_run import _nodes  # noqa: E402
from clusterutil import start_nodes  # noqa: E402

import rayfield as rf  # noqa: E402
from rayfield.util.cluster import stop_all  # noqa: E402

MB = 1 << 20


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


def _anon(proc: psutil.Process) -> int:
    """The process's private anonymous memory in bytes (``RssAnon``: heap, stacks), which
    leaks grow; the object store's shared-memory pages (``RssShmem``) are left out: they
    are the store's fixed arena, resident once touched."""
    with open(f"/proc/{proc.pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def _sample(temp_dir: Path) -> dict[str, tuple[int, int]]:
    """Node session -> (private memory of the node and its workers, open fds of the
    node); the memory is :func:`_anon` summed."""
    out = {}
    for session, proc in _nodes(temp_dir).items():
        try:
            procs = [proc, *proc.children(recursive=True)]
            rss = 0
            for p in procs:
                try:
                    rss += _anon(p)
                except (psutil.Error, OSError):
                    pass
            out[session] = (rss, proc.num_fds())
        except psutil.Error:
            continue
    return out


VERBOSE = False


def _parts(temp_dir: Path) -> str:
    """Each node's own private memory and its workers' (MB), for finding what grows."""
    out = []
    for session, proc in _nodes(temp_dir).items():
        try:
            own = _anon(proc) / MB
            workers = sorted(round(_anon(c) / MB) for c in proc.children(recursive=True))
        except (psutil.Error, OSError):
            continue
        out.append(f"{session[-5:]}: node {own:.0f} MB, workers {workers}")
    return "; ".join(out)


def _round(n: int, keepers: list[rf.ActorHandle]) -> None:
    assert rf.get([small.remote(i) for i in range(200)]) == [i + 1 for i in range(200)]
    big = make_big.remote(n)
    assert rf.get(read_big.remote(big), timeout=120) == 2.0 * n
    put = rf.put(np.ones(100 * MB // 8))
    assert rf.get(read_big.remote(put), timeout=120) == 2.0
    del big, put
    assert rf.get([k.add.remote(1) for k in keepers], timeout=60)


def soak(temp_dir: Path, minutes: float, warmup_min: float) -> list[dict[str, tuple[int, int]]]:
    """Run the soak; returns the samples (one a minute, the first after warm-up first)."""
    temp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    address = start_nodes(temp_dir, count=2, resources='{"x": 10}')
    rf.init(address=address, temp_dir=str(temp_dir))
    samples: list[dict[str, tuple[int, int]]] = []
    try:
        start = time.monotonic()
        next_sample = start + warmup_min * 60
        keepers = [Keeper.remote() for _ in range(2)]
        n = 0
        while time.monotonic() - start < minutes * 60:
            n += 1
            _round(n, keepers)
            if n % 10 == 0:  # actors come and go
                keepers = [Keeper.remote() for _ in range(2)]
            if time.monotonic() >= next_sample:
                samples.append(_sample(temp_dir))
                rss = {s[-12:]: f"{r / MB:.0f} MB, {f} fds" for s, (r, f) in samples[-1].items()}
                if VERBOSE:
                    rss["parts"] = _parts(temp_dir)  # type: ignore[assignment]
                print(f"{(time.monotonic() - start) / 60:5.1f} min, round {n}: {rss}", flush=True)
                next_sample += 60
    finally:
        rf.shutdown()
        stop_all(5.0, temp_dir=temp_dir)
    return samples


def growth(samples: list[dict[str, tuple[int, int]]], tolerance: float, fd_slack: int) -> list[str]:
    """What grew from the first sample to the last (empty: flat)."""
    if len(samples) < 2:
        return ["fewer than two samples after warm-up: soak longer"]
    problems = []
    for session, (rss0, fds0) in samples[0].items():
        if session not in samples[-1]:
            problems.append(f"node {session} is gone")
            continue
        rss1, fds1 = samples[-1][session]
        if rss1 > rss0 * (1 + tolerance):
            problems.append(f"node {session}: RSS {rss0 / MB:.0f} -> {rss1 / MB:.0f} MB")
        if fds1 > fds0 + fd_slack:
            problems.append(f"node {session}: fds {fds0} -> {fds1}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-min", type=float, default=3.0)
    parser.add_argument("--tolerance", type=float, default=0.25)
    parser.add_argument("--fd-slack", type=int, default=16)
    parser.add_argument("--verbose", action="store_true", help="each process's memory too")
    args = parser.parse_args(argv)
    global VERBOSE
    VERBOSE = args.verbose
    with tempfile.TemporaryDirectory(prefix="rf-soak-") as d:
        samples = soak(Path(d), args.minutes, args.warmup_min)
    problems = growth(samples, args.tolerance, args.fd_slack)
    for p in problems:
        print("GREW:", p, flush=True)
    print("flat" if not problems else "not flat", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
