"""Reaching the head of an SSH cluster from the launcher: ``exec`` with ``--screen``,
``--tmux`` and ``--port-forward``, ``attach`` (a shell on the head) and
``rsync-up``/``rsync-down``.

A command on the head gets ``RAYFIELD_ADDRESS``, ``RAYFIELD_TOKEN`` and
``RAYFIELD_HEAD_IP``. ``exec`` sends them on the SSH session's stdin; ``attach``, whose
stdin is the user's, gives the shell a command line that exports the address and reads
the token from the head's own session file (``$(cat ...)`` evaluated on the head), so
the token is on no command line. For ``local_process`` clusters the head is this
machine: ``attach`` starts ``$SHELL`` here with the same environment and
``rsync-up``/``rsync-down`` copy locally.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from rayfield.autoscaler import commands
from rayfield.autoscaler.command_runner import SSHCommandRunner, env_script

__all__ = ["attach", "exec_on_head", "rsync", "wrap_command"]


def wrap_command(cmd: str, screen: bool = False, tmux: bool = False) -> str:
    """``cmd`` run in a detached ``screen`` or ``tmux`` session (which stays open with a
    shell after it), or ``cmd`` itself.

    Raises:
        commands.LauncherError: both ``screen`` and ``tmux``.
    """
    if screen and tmux:
        raise commands.LauncherError("--screen and --tmux exclude each other: pick one")
    inner = shlex.quote(f"{cmd}; exec bash")
    if tmux:
        return f"tmux new-session -d bash -c {inner}"
    if screen:
        return f"screen -dm bash -c {inner}"
    return cmd


def exec_on_head(
    config: dict[str, Any],
    cmd: list[str] | str,
    screen: bool = False,
    tmux: bool = False,
    port_forward: tuple[int, ...] = (),
) -> int:
    """Run ``cmd`` on the head (see :func:`commands.exec_cluster`); on an SSH cluster
    optionally in screen/tmux and with local ports forwarded to the head's while it runs.

    Raises:
        commands.LauncherError: the cluster is not up; screen/tmux/port forwarding on a
            ``local_process`` cluster (its head is this machine).
    """
    provider = commands.provider_for(config)
    setup = commands.node_setup(config, provider)
    if setup is None:
        if screen or tmux or port_forward:
            raise commands.LauncherError(
                "--screen, --tmux and --port-forward need an SSH cluster: the local_process "
                "head is this machine, run the command directly"
            )
        return commands.exec_cluster(config, cmd)
    line = wrap_command(cmd if isinstance(cmd, str) else shlex.join(cmd), screen, tmux)
    if not port_forward:
        return commands.exec_cluster(config, line)
    env = commands.cluster_env(config)
    head = commands.head_node(provider)
    assert head is not None
    ssh = _ssh_runner(setup, head, "--port-forward").ssh_command(port_forward=port_forward)
    sys.stdout.flush()
    done = subprocess.run([*ssh, "bash -s"], input=env_script(line, env).encode(), check=False)
    return done.returncode


def attach(config: dict[str, Any], screen: bool = False, tmux: bool = False) -> int:
    """An interactive shell on the head (its exit status); with ``screen``/``tmux``, one
    that attaches to (or starts) such a session. Without a terminal on stdin, the
    shell reads its commands from stdin.

    Raises:
        commands.LauncherError: the cluster is not up.
    """
    env = commands.cluster_env(config)
    provider = commands.provider_for(config)
    setup = commands.node_setup(config, provider)
    interactive = sys.stdin.isatty()
    if setup is None:
        shell = os.environ.get("SHELL") or "/bin/bash"
        return subprocess.run([shell], env={**os.environ, **env}, check=False).returncode
    head = commands.head_node(provider)
    assert head is not None
    exports = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if k != "RAYFIELD_TOKEN"]
    node_env = setup.env(head, with_secrets=False)
    token = shlex.quote(node_env["RAYFIELD_NODE_TEMP_DIR"] + "/session_latest/token")
    exports.append(f"export RAYFIELD_TOKEN=$(cat {token})")
    shell = "tmux attach || tmux new" if tmux else "screen -xRR" if screen else "bash -l"
    remote = "; ".join([*exports, f"exec {shell}" if not (tmux or screen) else shell])
    ssh = _ssh_runner(setup, head, "attach").ssh_command(tty=interactive)
    return subprocess.run([*ssh, remote], check=False).returncode


def _ssh_runner(setup: Any, head: str, what: str) -> SSHCommandRunner:
    """The head's SSH runner.

    Raises:
        commands.LauncherError: the provider reaches its nodes otherwise (Kubernetes).
    """
    runner = setup.runner(head)
    if not isinstance(runner, SSHCommandRunner):
        raise commands.LauncherError(
            f"{what} needs SSH and this provider reaches its nodes otherwise; on Kubernetes "
            f"use kubectl: kubectl exec -it {head} -- bash, kubectl port-forward {head} PORT"
        )
    return runner


def rsync(config: dict[str, Any], source: str, target: str, down: bool) -> None:
    """Copy ``source`` (this machine) to ``target`` on the head, or with ``down`` from
    the head's ``source`` to this machine's ``target``.

    Raises:
        commands.LauncherError: the cluster has no head.
        rayfield.autoscaler.command_runner.CommandError: the copy failed.
    """
    provider = commands.provider_for(config)
    head = commands.head_node(provider)
    if head is None:
        raise commands.LauncherError("the cluster has no head: run `rayfield-autoscaler up`")
    setup = commands.node_setup(config, provider)
    if setup is None:  # the head is this machine
        src, dst = Path(source).expanduser(), Path(target).expanduser()
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        return
    runner = setup.runner(head)
    if down:
        runner.sync_down(source, target)
    else:
        runner.sync_up(source, target)
