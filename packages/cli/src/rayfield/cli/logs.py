"""``rayfield logs``: the logs of workers and of every node's components."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from rayfield.cli._common import Cluster, cluster_options, human_bytes, print_table
from rayfield.cli._interrupt import StopOnInterrupt

if TYPE_CHECKING:
    from rayfield.util.state import StateClient

CHUNK = 64 << 10  # first tail read; grows fourfold until it holds enough lines
MAX_READ = 4 << 20  # what one ReadLog answers at most


def tail(client: StateClient, node: str, name: str, lines: int) -> tuple[bytes, int]:
    """The last ``lines`` lines of log ``name`` on ``node`` (0: the whole file) and the
    offset just past them.

    Raises:
        click.ClickException: when the node has no such file.
    """
    if lines == 0:
        data, offset = b"", 0
        while True:
            reply = _read(client, node, name, offset, MAX_READ)
            data += reply["data"]
            offset = reply["offset"] + len(reply["data"])
            if not reply["data"] or offset >= reply["size"]:
                return data, offset
    chunk = CHUNK
    while True:
        reply = _read(client, node, name, -chunk, chunk)
        data, start = bytes(reply["data"]), reply["offset"]
        # One more newline than lines: the first line of the chunk may be cut.
        if data.count(b"\n") > lines or start == 0 or chunk >= MAX_READ:
            break
        chunk *= 4
    end = start + len(data)
    kept = data.splitlines(keepends=True)
    if start > 0 and kept:
        kept = kept[1:]  # cut at the chunk's start
    return b"".join(kept[-lines:]), end


def _read(client: StateClient, node: str, name: str, offset: int, size: int) -> dict[str, Any]:
    reply = client.read_log(node, name, offset=offset, max_bytes=size)
    if not reply["found"]:
        raise click.ClickException(
            f"{name} does not exist on node {node}: `rayfield logs --list` shows its log files"
        )
    return reply


def follow_log(
    client: StateClient,
    node: str,
    name: str,
    offset: int,
    interval_s: float,
    interrupt: StopOnInterrupt,
) -> None:
    """Print what is appended to the log from ``offset`` on, until ``interrupt`` is
    stopped (Ctrl-C: see ``_interrupt.py``; the read under way when it comes ends first)."""
    while not interrupt.stopped:
        reply = _read(client, node, name, offset, MAX_READ)
        if reply["size"] < offset:  # truncated or replaced: start again from its top
            offset = 0
            continue
        if reply["data"]:
            sys.stdout.buffer.write(reply["data"])
            sys.stdout.buffer.flush()
            offset = reply["offset"] + len(reply["data"])
            continue
        interrupt.sleep(interval_s)


def list_logs(client: StateClient) -> None:
    """A table of every node's log files."""
    rows = [
        {
            **f,
            "size_text": human_bytes(f["size"]),
            "modified": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(f["mtime_s"])),
            "pid": client.worker_pid(f["name"]),
        }
        for f in sorted(client.logs(), key=lambda f: (f["node"], f["name"]))
    ]
    columns = [
        ("node", "NODE"),
        ("name", "FILE"),
        ("size_text", "SIZE"),
        ("modified", "MODIFIED"),
        ("pid", "WORKER PID"),
    ]
    print_table(columns, rows)
    click.echo(
        "show one with `rayfield logs --node NODE FILE`, a worker's with `rayfield logs PID`"
    )


@click.command()
@click.argument("pid", type=int, required=False)
@click.option("--actor", "actor_id", metavar="ID", help="The log of the worker hosting this actor.")
@click.option("--task", "task_id", metavar="ID", help="The log of the worker that ran this task.")
@click.option(
    "--node",
    "node_file",
    nargs=2,
    metavar="NODE FILE",
    default=None,
    help="Log FILE of NODE (an address, node id prefix or host name), e.g. "
    "`--node 127.0.0.1:40123 node.out`; gcs.out is on the head's node.",
)
@click.option("--list", "list_files", is_flag=True, help="List the log files of every node.")
@click.option(
    "--lines",
    "-n",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="Show the last N lines (0: the whole file).",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep printing what is appended to the log until Ctrl-C (which ends the command "
    "with exit status 0).",
)
@click.option(
    "--interval-s",
    type=click.FloatRange(min=0.05),
    default=0.5,
    show_default=True,
    help="With --follow: seconds between two reads when nothing new came.",
)
@cluster_options
def logs(
    cluster: Cluster,
    pid: int | None,
    actor_id: str | None,
    task_id: str | None,
    node_file: tuple[str, str] | None,
    list_files: bool,
    lines: int,
    follow: bool,
    interval_s: float,
) -> None:
    """Show a log: a worker's, by PID, by an actor it hosts (--actor) or by a task it ran
    (--task), or any component log of a node (--node NODE FILE: node.out, gcs.out,
    worker-<pid>.out, events-<pid>.jsonl). Ids may be unique prefixes. --list shows the
    log files of every node.

    The worker logs hold what the tasks and actors printed (stdout and stderr).
    """
    given = [x is not None for x in (pid, actor_id, task_id, node_file)] + [list_files]
    if sum(given) != 1:
        raise click.UsageError("give one of PID, --actor ID, --task ID, --node NODE FILE or --list")
    with contextlib.ExitStack() as stack:
        # With --follow, Ctrl-C stops the command between two reads from the start on
        # (closing the state client last, with no call under way).
        interrupt = stack.enter_context(StopOnInterrupt()) if follow else None
        client = stack.enter_context(cluster.state())
        if list_files:
            list_logs(client)
            return
        if node_file is not None:
            node, name = client.resolve_node(node_file[0]).address, node_file[1]
        else:
            node, name = client.find_log(pid, actor_id, task_id)
        data, offset = tail(client, node, name, lines)
        click.echo(f"==> {name} on node {node} <==", err=True)
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        if interrupt is not None:
            follow_log(client, node, name, offset, interval_s, interrupt)
