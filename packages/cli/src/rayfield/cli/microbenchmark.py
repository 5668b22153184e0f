"""``rayfield microbenchmark``: a short run of the core microbenchmarks on this machine."""

from __future__ import annotations

import os
import time
from typing import Any

import click

from rayfield.cli._common import Cluster, cluster_options


def _rows(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str]:
    from rayfield.util import perf

    known = [k for k, _ in perf.ROWS]
    if not value:
        return list(perf.QUICK_ROWS)
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise click.BadParameter(f"unknown row(s) {', '.join(unknown)}; rows: {', '.join(known)}")
    return [k for k in known if k in wanted]


@click.command()
@click.option(
    "--rows",
    callback=_rows,
    default=None,
    metavar="KEY,KEY",
    help="Run only these rows (comma-separated keys, e.g. tasks_sync,actor_async; default: "
    "get_calls, put_calls, put_gigabytes, tasks_sync, tasks_async, actor_sync, actor_async, "
    "actor_concurrent; every row of the full benchmark may be named).",
)
@click.option(
    "--budget-s",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Timed seconds per row (after a fifth of that untimed as warm-up).",
)
@click.option(
    "--num-cpus",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="CPUs of the local rayfield.init() the benchmark starts.",
)
@cluster_options
def microbenchmark(cluster: Cluster, rows: list[str], budget_s: float, num_cpus: int) -> None:
    """Measure rayfield's core operations on this machine and print one line per row
    with its rate: single-client get and put calls and put throughput, tasks (sync: one
    at a time; async: 1,000 submitted, then waited for), actor calls (sync, async) and
    calls to a threaded actor (max_concurrency=16).

    It starts a local cluster with rayfield.init() (or joins the one at --address) and
    runs the rows of packages/core/benchmarks/bench_core.py, shorter. Rates vary with
    the machine's load: compare runs made one after the other.
    """
    import rayfield as rf
    from rayfield.util import perf

    params = {**perf.QUICK_PARAMS, "budget_s": budget_s, "warmup_s": budget_s / 5}
    kwargs: dict[str, Any] = {"log_to_driver": False}
    if cluster.temp_dir is not None:
        kwargs["temp_dir"] = str(cluster.temp_dir)
    if cluster.address:
        address, token = cluster.resolve()
        os.environ["RAYFIELD_TOKEN"] = token  # init() reads it to join
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = num_cpus
    labels = dict(perf.ROWS)
    t0 = time.perf_counter()
    rf.init(**kwargs)
    try:
        where = f"cluster {cluster.address}" if cluster.address else f"{num_cpus} CPUs"
        click.echo(f"rayfield.init() took {time.perf_counter() - t0:.2f} s ({where})")
        setups = perf.build(rf, params)
        width = max(len(labels[k]) for k in rows)
        for key in rows:
            call, work = setups[key]()
            result = perf.timed_rate(call, work, params["budget_s"], params["warmup_s"])
            unit = perf.UNITS.get(key, "per second")
            click.echo(f"{labels[key]:<{width}}  {result['rate']:>14,.1f} {unit}")
    finally:
        rf.shutdown()
