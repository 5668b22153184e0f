"""The ``rayfield-autoscaler`` command, and the same commands for ``rayfield``.

Each command is a click command of its own; :data:`COMMANDS` lists them, and
rayfield-cli adds each one registered under the ``rayfield.cli_commands`` entry-point
group (see pyproject.toml) to the ``rayfield`` group.

This module imports only click at its top: the launcher's modules (and through them
jsonschema, yaml, psutil and the cloud clients) are imported by the command that runs,
so ``rayfield-autoscaler --help`` and ``rayfield --help``, which load every command to
list it, stay fast (``tests/integration/test_cli_startup.py``).
"""

from __future__ import annotations

import functools
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
#: Seconds between two autoscaler steps when ``up`` is not told
#: (``rayfield.autoscaler.commands.DEFAULT_UPDATE_INTERVAL_S``; equal, checked by a test).
DEFAULT_UPDATE_INTERVAL_S = 5.0


def _errors(fn: F) -> F:
    """Config, provider and launcher errors, and files refused as not this user's alone
    (``UnsafeFileError``), end the command with their one line."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rayfield.autoscaler.command_runner import CommandError
        from rayfield.autoscaler.commands import LauncherError
        from rayfield.autoscaler.config import ConfigError
        from rayfield.autoscaler.head_monitor import HeadMonitorError
        from rayfield.autoscaler.node_provider import ProviderError
        from rayfield.exceptions import UnsafeFileError

        errors = (ConfigError, ProviderError, LauncherError, CommandError, HeadMonitorError)
        try:
            return fn(*args, **kwargs)
        except (*errors, UnsafeFileError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper  # type: ignore[return-value]


def _config_arg(fn: F) -> F:
    fn = click.option(
        "-n", "--cluster-name", default=None, help="Override the config's cluster_name."
    )(fn)
    return click.argument(
        "cluster_config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path)
    )(fn)


def _load(path: Path, cluster_name: str | None, **overrides: Any) -> dict[str, Any]:
    from rayfield.autoscaler.config import load_config

    return load_config(path, {"cluster_name": cluster_name, **overrides})


@click.command()
@_config_arg
@click.option("--no-restart", is_flag=True, help="Keep the running autoscaler (and nodes).")
@click.option("--restart-only", is_flag=True, help="Only restart: skip setup steps.")
@click.option(
    "--min-workers",
    type=click.IntRange(min=0),
    help="Override min_workers (configs with worker_nodes; node types set their own).",
)
@click.option("--max-workers", type=click.IntRange(min=0), help="Override max_workers.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--update-interval-s",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_UPDATE_INTERVAL_S,
    show_default=True,
    help="Seconds between two autoscaler steps.",
)
@_errors
def up(
    cluster_config_file: Path,
    cluster_name: str | None,
    no_restart: bool,
    restart_only: bool,
    min_workers: int | None,
    max_workers: int | None,
    yes: bool,
    update_interval_s: float,
) -> None:
    """Create or update the cluster of CLUSTER_CONFIG_FILE and start its autoscaler."""
    from rayfield.autoscaler import commands

    cfg = _load(cluster_config_file, cluster_name, min_workers=min_workers, max_workers=max_workers)
    if not yes:
        click.confirm(f"Create or update cluster {cfg['cluster_name']!r}?", abort=True)
    t0 = time.monotonic()
    commands.create_or_update(cfg, no_restart, restart_only, update_interval_s, echo=click.echo)
    click.echo(f"cluster {cfg['cluster_name']!r} is up ({time.monotonic() - t0:.1f} s)")
    click.echo(f"Run a command on it:\n    rayfield-autoscaler exec {cluster_config_file} 'CMD'")


@click.command()
@_config_arg
@click.option("--workers-only", is_flag=True, help="Terminate only the workers.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@_errors
def down(
    cluster_config_file: Path, cluster_name: str | None, workers_only: bool, yes: bool
) -> None:
    """Tear down the cluster of CLUSTER_CONFIG_FILE (its autoscaler and nodes)."""
    from rayfield.autoscaler import commands

    cfg = _load(cluster_config_file, cluster_name)
    if not yes:
        what = "the workers of" if workers_only else "cluster"
        click.confirm(f"Terminate {what} {cfg['cluster_name']!r}?", abort=True)
    n = commands.teardown(cfg, workers_only, echo=click.echo)
    click.echo(f"terminated {n} node{'s' if n != 1 else ''}")


@click.command("get-head-ip")
@_config_arg
@_errors
def get_head_ip(cluster_config_file: Path, cluster_name: str | None) -> None:
    """Print the head node's IP."""
    from rayfield.autoscaler import commands

    provider = commands.provider_for(_load(cluster_config_file, cluster_name))
    head = commands.head_node(provider)
    if head is None:
        raise click.ClickException("the cluster has no head: run `rayfield-autoscaler up` first")
    click.echo(provider.external_ip(head))


@click.command("get-worker-ips")
@_config_arg
@_errors
def get_worker_ips(cluster_config_file: Path, cluster_name: str | None) -> None:
    """Print each worker's IP and node id, one worker a line."""
    from rayfield.autoscaler import commands, head_monitor

    cfg = _load(cluster_config_file, cluster_name)
    provider = commands.provider_for(cfg)
    setup = commands.head_monitor_setup(provider, commands.node_setup(cfg, provider))
    if setup is not None:  # the head's monitor keeps the workers' records
        head_monitor.pull_state(cfg, setup)
    for node_id in commands.worker_nodes(provider):
        click.echo(f"{provider.internal_ip(node_id)} {node_id}")


def _run_on_head(
    cfg: dict[str, Any], cmd: list[str] | str, start: bool, stop: bool, options: dict[str, Any]
) -> None:
    from rayfield.autoscaler import commands, remote

    if start:
        commands.create_or_update(cfg, echo=click.echo)
    try:
        status = remote.exec_on_head(
            cfg, cmd, options["screen"], options["tmux"], tuple(options["port_forward"])
        )
    finally:
        if stop:
            commands.teardown(cfg, echo=click.echo)
    if status:
        raise click.exceptions.Exit(status)


def _exec_options(fn: F) -> F:
    for opt in (
        click.option(
            "--port-forward", type=int, multiple=True, help="Forward this local port to the head's."
        ),
        click.option("--tmux", is_flag=True, help="Run in a detached tmux session."),
        click.option("--screen", is_flag=True, help="Run in a screen session."),
        click.option("--stop", is_flag=True, help="Tear the cluster down afterwards."),
        click.option("--start", is_flag=True, help="Bring the cluster up first if needed."),
    ):
        fn = opt(fn)
    return fn


@click.command("exec")
@_config_arg
@click.argument("cmd")
@_exec_options
@_errors
def exec_(
    cluster_config_file: Path,
    cluster_name: str | None,
    cmd: str,
    start: bool,
    stop: bool,
    **kw: Any,
) -> None:
    """Run CMD (a shell command) on the head, with RAYFIELD_ADDRESS set."""
    _run_on_head(_load(cluster_config_file, cluster_name), cmd, start, stop, kw)


@click.command(context_settings={"ignore_unknown_options": True})
@_config_arg
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@_exec_options
@_errors
def submit(
    cluster_config_file: Path,
    cluster_name: str | None,
    script: str,
    script_args: tuple[str, ...],
    start: bool,
    stop: bool,
    **kw: Any,
) -> None:
    """Run SCRIPT with Python on the head (args after it go to the script). On an SSH
    cluster the script is copied to ~/rayfield-submit/ on the head and run with the
    head's Python (``provider.head_python``, default python3; a command, split as
    the shell would)."""
    from rayfield.autoscaler import commands, head_monitor, remote

    cfg = _load(cluster_config_file, cluster_name)
    cmd = [sys.executable, script, *script_args]
    if commands.provider_for(cfg).needs_setup:
        target = f"rayfield-submit/{Path(script).name}"
        if start:
            commands.create_or_update(cfg, echo=click.echo)
            start = False
        remote.rsync(cfg, script, target, down=False)
        cmd = [*head_monitor.head_python(cfg), target, *script_args]
    click.echo(f"running: {shlex.join(cmd)}", err=True)
    _run_on_head(cfg, cmd, start, stop, kw)


@click.command()
@_config_arg
@click.option("--follow/--no-follow", default=True, help="Keep printing new lines.")
@click.option("--lines", type=int, default=50, show_default=True, help="Lines shown first.")
@_errors
def monitor(cluster_config_file: Path, cluster_name: str | None, follow: bool, lines: int) -> None:
    """Print the autoscaler's log (and follow it); on an SSH cluster, the log of the
    monitor on the head."""
    from rayfield.autoscaler import commands, head_monitor

    cfg = _load(cluster_config_file, cluster_name)
    provider = commands.provider_for(cfg)
    setup = commands.head_monitor_setup(provider, commands.node_setup(cfg, provider))
    if setup is not None:
        status = head_monitor.follow_log(cfg, setup, lines, follow)
        if status:
            raise click.exceptions.Exit(status)
        return
    log = commands.monitor_log(provider)
    if not log.exists():
        raise click.ClickException(f"no autoscaler log at {log}: run `rayfield-autoscaler up`")
    from rayfield.util import private_files

    with private_files.open_private(log, "rb") as f:
        for raw in f.readlines()[-lines:]:
            click.echo(raw.decode(errors="replace"), nl=False)
        while follow:
            raw = f.readline()
            if raw:
                click.echo(raw.decode(errors="replace"), nl=False)
            else:
                time.sleep(0.5)


@click.command()
@_config_arg
@click.option("--screen", is_flag=True, help="Attach to (or start) a screen session.")
@click.option("--tmux", is_flag=True, help="Attach to (or start) a tmux session.")
@_errors
def attach(cluster_config_file: Path, cluster_name: str | None, screen: bool, tmux: bool) -> None:
    """Open a shell on the head, with RAYFIELD_ADDRESS set."""
    from rayfield.autoscaler import remote

    status = remote.attach(_load(cluster_config_file, cluster_name), screen, tmux)
    if status:
        raise click.exceptions.Exit(status)


@click.command("rsync-up")
@_config_arg
@click.argument("source")
@click.argument("target")
@_errors
def rsync_up(cluster_config_file: Path, cluster_name: str | None, source: str, target: str) -> None:
    """Copy SOURCE (here) to TARGET on the head."""
    from rayfield.autoscaler import remote

    remote.rsync(_load(cluster_config_file, cluster_name), source, target, down=False)


@click.command("rsync-down")
@_config_arg
@click.argument("source")
@click.argument("target")
@_errors
def rsync_down(
    cluster_config_file: Path, cluster_name: str | None, source: str, target: str
) -> None:
    """Copy SOURCE on the head to TARGET (here)."""
    from rayfield.autoscaler import remote

    remote.rsync(_load(cluster_config_file, cluster_name), source, target, down=True)


COMMANDS = (
    up,
    down,
    exec_,
    submit,
    attach,
    rsync_up,
    rsync_down,
    get_head_ip,
    get_worker_ips,
    monitor,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayfield-autoscaler", prog_name="rayfield-autoscaler")
def cli() -> None:
    """Launch rayfield clusters from a cluster YAML and autoscale them."""


for _command in COMMANDS:
    cli.add_command(_command)

if __name__ == "__main__":
    cli()
