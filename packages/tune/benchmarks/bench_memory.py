"""The driver's memory as an experiment grows: RSS after every tenth of N trials.

Runs ``tune.run`` with ``--trials`` trials of a function trainable that sleeps
``--sleep-ms`` and reports ``--reports`` times, and prints the driver's resident memory
(``VmRSS``) after each tenth of the trials has finished, its peak (``ru_maxrss``), and the
growth per 1,000 finished trials between the first and the last tenth (what a longer run
adds). With ``--tracemalloc`` it also prints the 15 source lines holding the most Python
memory when the experiment ends (everything the driver still keeps then is alive).

    python packages/tune/benchmarks/bench_memory.py --trials 5000
    python packages/tune/benchmarks/bench_memory.py --trials 2000 --tracemalloc

A measurement, not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import tracemalloc
from typing import Any


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(trials: int, reports: int, sleep_ms: float, cpus: int, trace: bool) -> dict[str, Any]:
    """Run the experiment; returns the RSS samples, the peak and the growth per 1,000
    trials (all in MB), and with ``trace`` the top allocation sites at the end."""
    import rayfield
    from rayfield import tune

    rayfield.init(num_cpus=cpus, configure_logging=False)
    samples: list[tuple[int, float]] = []
    top: list[str] = []
    step = max(trials // 10, 1)

    class Sample(tune.Callback):
        done = 0

        def on_trial_complete(self, trial: Any) -> None:
            self.done += 1
            if self.done % step == 0:
                samples.append((self.done, _rss_mb()))

        def on_experiment_end(self, all_trials: list[Any]) -> None:
            if trace:
                snapshot = tracemalloc.take_snapshot()
                for stat in snapshot.statistics("lineno")[:15]:
                    top.append(f"{stat.size / 2**20:8.2f} MB {stat.count:9d}  {stat.traceback}")

    def trainable(config: dict[str, Any]) -> None:
        for i in range(reports):
            if sleep_ms:
                time.sleep(sleep_ms / 1000 / reports)
            tune.report(score=config["x"] * i, step_loss=1.0 / (i + 1))

    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        tune.run(
            trainable,
            config={"x": tune.uniform(0, 1)},
            num_samples=trials,
            storage_path=tempfile.mkdtemp(prefix="bench-memory-"),
            verbose=0,
            callbacks=[Sample()],
        )
    finally:
        rayfield.shutdown()
    wall = time.perf_counter() - start
    first, last = samples[0], samples[-1]
    growth = (last[1] - first[1]) / max(last[0] - first[0], 1) * 1000
    return {
        "trials": trials,
        "reports": reports,
        "wall_s": wall,
        "rss_mb": samples,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "growth_mb_per_1000_trials": growth,
        "top_allocations": top,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=5000)
    parser.add_argument("--reports", type=int, default=1)
    parser.add_argument("--sleep-ms", type=float, default=10.0)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--json", default=None, help="also write the row to this file")
    args = parser.parse_args(argv)
    row = measure(args.trials, args.reports, args.sleep_ms, args.num_cpus, args.tracemalloc)
    print(f"{row['trials']} trials x {row['reports']} reports: wall {row['wall_s']:.1f} s")
    samples = ", ".join(f"{n}: {m:.0f}" for n, m in row["rss_mb"])
    print(f"finished trials -> driver RSS MB: {samples}")
    print(
        f"peak RSS {row['peak_rss_mb']:.0f} MB; growth "
        f"{row['growth_mb_per_1000_trials']:.2f} MB per 1,000 trials"
    )
    for line in row["top_allocations"]:
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
