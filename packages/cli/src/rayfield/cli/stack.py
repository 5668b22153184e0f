"""``rayfield stack``: py-spy dumps of the Python stacks of this machine's workers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rayfield.cli._common import Cluster, cluster_options

if TYPE_CHECKING:
    from rayfield.util.state import StateClient

PERMISSION_HINT = (
    "py-spy cannot attach to pid {pid} (permission denied): run it as root "
    "(`sudo env PATH=$PATH rayfield stack`), or allow tracing your own processes with "
    "`echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope` (in a container: run it with "
    "--cap-add SYS_PTRACE)"
)
_DENIED = ("permission denied", "operation not permitted")


def find_py_spy() -> str:
    """The py-spy executable: next to this interpreter (a venv's bin), else on PATH.

    Raises:
        click.ClickException: when py-spy is not installed.
    """
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("py-spy")
    if found is None:
        raise click.ClickException(
            "py-spy is not installed: `pip install py-spy` (it comes with rayfield-cli)"
        )
    return found


def attach_error(pid: int, output: str) -> str:
    """What to tell the user when ``py-spy dump --pid PID`` failed with ``output``."""
    if any(word in output.lower() for word in _DENIED):
        return PERMISSION_HINT.format(pid=pid)
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return f"py-spy could not dump pid {pid}: {lines[0] if lines else 'no output'}"


def local_workers(client: StateClient) -> list[dict[str, Any]]:
    """The workers of the cluster's alive nodes on this machine (same host name, process
    alive here), in node then pid order."""
    here = socket.gethostname()
    local = {n["address"] for n in client.node_records() if n["alive"] and n["hostname"] == here}
    import psutil

    workers = [w for w in client.workers() if w["node"] in local and psutil.pid_exists(w["pid"])]
    return sorted(workers, key=lambda w: (w["node"], w["pid"]))


@click.command()
@click.option(
    "--native",
    is_flag=True,
    help="Also show native (C/C++) frames (py-spy --native; slower).",
)
@click.option(
    "--timeout-s",
    type=click.FloatRange(min=1),
    default=20.0,
    show_default=True,
    help="Seconds one dump may take.",
)
@cluster_options
def stack(cluster: Cluster, native: bool, timeout_s: float) -> None:
    """Dump the Python stack of every rayfield worker on this machine's nodes, with
    py-spy (`py-spy dump --pid PID`), to see where tasks and actors are stuck.

    Attaching needs the right to trace the workers: as root, or as their user with
    /proc/sys/kernel/yama/ptrace_scope at 0.
    """
    py_spy = find_py_spy()
    with cluster.state() as client:
        workers = local_workers(client)
    if not workers:
        raise click.ClickException(
            "no rayfield workers run on this machine's nodes (`rayfield list workers` "
            "shows the cluster's)"
        )
    failures = []
    for w in workers:
        what = f"actor {w['actor_id']}" if w.get("actor_id") else w["state"]
        click.echo(f"=== worker {w['pid']} on node {w['node']} ({what}) ===")
        cmd = [py_spy, "dump", "--pid", str(w["pid"]), *(["--native"] if native else [])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            failures.append(f"py-spy took over {timeout_s:g} s on pid {w['pid']}")
            continue
        if proc.returncode != 0:
            failures.append(attach_error(w["pid"], proc.stderr + proc.stdout))
            click.echo(failures[-1], err=True)
            continue
        click.echo(proc.stdout.rstrip() + "\n")
    if failures:
        if len(failures) == len(workers) and failures[0].startswith("py-spy cannot attach"):
            raise click.ClickException(failures[0])
        raise click.ClickException(f"{len(failures)} of {len(workers)} dumps failed (see above)")
