"""``rayfield timeline``: the cluster's recent task events as a Chrome trace file."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import click

from rayfield.cli._common import Cluster, cluster_options, human_bytes


def default_output() -> Path:
    """``<tmp>/rayfield-timeline-<YYYY-mm-dd_HH-MM-SS>.json``."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    return Path(tempfile.gettempdir()) / f"rayfield-timeline-{stamp}.json"


@click.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="File to write (default <tmp>/rayfield-timeline-<date>_<time>.json).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Use only the N most recent task events (0: all the GCS keeps, up to 100,000).",
)
@cluster_options
def timeline(cluster: Cluster, output: Path | None, limit: int) -> None:
    """Write a Chrome trace of the cluster's recent tasks and actor calls.

    Each task shows as one span per phase (queued, fetching arguments, running, storing
    results) on its worker's row, grouped by node; profile() spans appear as recorded.
    Open the file in chrome://tracing or https://ui.perfetto.dev.
    """
    with cluster.state() as client:
        trace = client.timeline(limit)
    path = output or default_output()
    try:
        if output is None:  # a new file in the shared temp dir: never one found there
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(trace))
        else:
            path.write_text(json.dumps(trace))
    except OSError as exc:
        raise click.ClickException(
            f"cannot write {path}: {exc.strerror}; choose another file with --output"
        ) from None
    nodes = {e["pid"] for e in trace}
    click.echo(
        f"wrote {len(trace)} trace events from {len(nodes)} node(s) to {path} "
        f"({human_bytes(path.stat().st_size)})"
    )
    if not trace:
        click.echo("no task events yet: run some tasks first", err=True)
    click.echo("open it in chrome://tracing or https://ui.perfetto.dev")
