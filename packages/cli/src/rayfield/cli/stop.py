"""``rayfield stop``: stop every rayfield process of this user on this machine."""

from __future__ import annotations

from pathlib import Path

import click

from rayfield.cli._common import console
from rayfield.util import cluster


@click.command()
@click.option(
    "--temp-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Stop only the nodes whose sessions are under this directory, and clean "
    "it (default: stop all of this user's, clean <tmp>/rayfield-<uid>).",
)
@click.option(
    "--grace-period",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds a process has to exit after SIGTERM before it is killed.",
)
def stop(temp_dir: Path | None, grace_period: float) -> None:
    """Stop every rayfield node and GCS this user started on this machine.

    Nodes stop their workers and leave their cluster first, then the GCS stops. Sockets
    left by processes that had to be killed are removed; the object stores' shared
    memory goes with their processes. Logs stay in the session directories.
    """
    n = _stop_with_progress(grace_period, temp_dir)
    cleaned = cluster.clean_stopped_sessions(temp_dir)
    if n == 0:
        click.echo("no rayfield processes were running")
    else:
        click.echo(f"stopped {n} rayfield process{'es' if n > 1 else ''}")
    if cleaned:
        click.echo(f"removed what {cleaned} stopped node{'s' if cleaned > 1 else ''} left behind")


def _stop_with_progress(grace_s: float, temp_dir: Path | None) -> int:
    """``cluster.stop_all`` with a progress bar of the processes stopped on stderr (its
    per-group lines only when stderr is not a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    out = console(stderr=True)
    if not out.is_terminal:
        return cluster.stop_all(
            grace_s, on_progress=lambda m: click.echo(m, err=True), temp_dir=temp_dir
        )
    total = len(cluster.rayfield_processes(temp_dir))
    columns = (TextColumn("stopping rayfield processes"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=out, transient=True) as progress:
        bar = progress.add_task("stop", total=total)
        return cluster.stop_all(
            grace_s,
            on_progress=progress.console.print,
            temp_dir=temp_dir,
            on_exit=lambda _proc: progress.advance(bar),
        )
