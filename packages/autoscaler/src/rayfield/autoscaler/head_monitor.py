"""The monitor of an SSH cluster runs on its head, as in the reference: the launcher
copies the bootstrap config, the SSH key and its node records there and starts
``python -m rayfield.autoscaler.monitor`` on the head, which then launches, sets up and
terminates the workers itself (over SSH from the head). This holds for every provider
whose nodes are set up over SSH: ``local``, and ``aws``, ``gcp``, ``kubernetes`` and
``external`` through :class:`~rayfield.autoscaler.launcher_state.SSHClusterProvider`.
Once ``up`` returns, the launching machine may go away; ``down`` stops the monitor.

On the head, in the SSH user's home, ``rayfield-cluster-<cluster_name>/`` (mode 0700)::

    bootstrap.yaml   the config as the head sees it (0600): ``provider.cluster_dir`` is
                     this directory, ``provider.use_internal_ips`` true (the head reaches
                     the workers inside the cluster), ``auth.ssh_private_key`` the copied
                     key, and each file mount's source is its remote path (the head has
                     it after its own setup), as the reference rewrites its bootstrap
                     config
    ssh_key          the cluster's SSH key (0600)
    state.json       the node records the head's monitor keeps (``launcher.json`` for a
    (launcher.json)  cloud or external provider: each node's rayfield id, the head's GCS
                     address and token; 0600). The launcher's copy is pushed at ``up``
                     and pulled back by ``down``, ``get-worker-ips`` and :func:`pull_state`
    monitor.log      the monitor's log (``rayfield-autoscaler monitor`` follows it)
    monitor.pid      its pid
    known_hosts      the host keys of the workers the head's monitor reaches over SSH
                     (0600; see rayfield.autoscaler.known_hosts)

The head's monitor keeps and reads these through :mod:`rayfield.util.private_files`
as the launcher does its own (:mod:`rayfield.autoscaler.cluster_state`); the files the
launcher copies there go through a temporary file in its own private cluster directory.

No cloud credential is copied: the provider section names only where the nodes are
(region, project, namespace), and the head's monitor authenticates as the head itself
(AWS: the head's IAM instance profile; GCP: the service account the bootstrap attaches
to the head; Kubernetes: the head pod's service account; see docs/providers.md).

The head runs the monitor with ``provider.head_python`` (default ``python3``; a command,
split as the shell would, e.g. ``env PYTHONPATH=/opt/lib /opt/venv/bin/python``): a
Python with rayfield-autoscaler (and the provider's extra) installed on the head.

The launcher notes in its record of the head that it copied files there and started a
monitor (:data:`RECORD_KEY`); the commands that reach the head's monitor do nothing on a
head without that note, so a head that never answered SSH is not waited for again.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import yaml

from rayfield.autoscaler.cluster_state import StatefulProvider, open_log
from rayfield.autoscaler.command_runner import CommandError, CommandRunner
from rayfield.autoscaler.node_provider import ProviderError
from rayfield.autoscaler.node_setup import NodeSetup

__all__ = [
    "RECORD_KEY",
    "HeadMonitorError",
    "follow_log",
    "head_bootstrap",
    "head_dir",
    "head_python",
    "pull_state",
    "remove",
    "running",
    "start",
    "started",
    "started_line",
    "stop",
]

MODULE = "rayfield.autoscaler.monitor"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 150.0  # the monitor finishes the launches it started before it exits
#: The key of the launcher's record of the head that says what ``up`` left there:
#: ``{"dir": <head_dir>, "pid": <monitor pid or None>}``.
RECORD_KEY = "head_monitor"


def started_line(cluster_name: str, pid: int) -> str:
    """What the monitor (:mod:`rayfield.autoscaler.monitor`, on the head or on the
    launching machine) logs once it runs (``up`` waits for this line)."""
    return f"monitor of {cluster_name!r} started (pid {pid})"


class HeadMonitorError(RuntimeError):
    """The monitor on the head could not be started or reached; the message says why."""


def head_dir(config: dict[str, Any]) -> str:
    """The cluster's directory on the head, relative to the SSH user's home."""
    return f"rayfield-cluster-{config['cluster_name']}"


def head_python(config: dict[str, Any]) -> list[str]:
    """``provider.head_python`` as an argv prefix (default ``["python3"]``).

    Raises:
        HeadMonitorError: it does not parse as a command (unbalanced quotes) or is empty.
    """
    text = str(config["provider"].get("head_python", "python3"))
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise HeadMonitorError(f"provider.head_python {text!r} is not a command ({exc})") from None
    if not argv:
        raise HeadMonitorError("provider.head_python is empty: give the head's Python")
    return argv


def head_bootstrap(config: dict[str, Any]) -> dict[str, Any]:
    """The config the head's monitor loads (see the module docstring). Pure."""
    out = copy.deepcopy(config)
    d = f"~/{head_dir(config)}"
    out["provider"]["cluster_dir"] = d
    out["provider"]["use_internal_ips"] = True
    if config.get("auth", {}).get("ssh_private_key"):  # none: nodes reached without SSH
        out["auth"]["ssh_private_key"] = f"{d}/ssh_key"
    out["file_mounts"] = {remote: remote for remote in config.get("file_mounts", {})}
    return out


def _head(setup: NodeSetup) -> tuple[str, CommandRunner]:
    head = setup.provider.head_id()
    return head, setup.runner(head)


def _note(setup: NodeSetup) -> dict[str, Any] | None:
    """What the launcher noted in its record of the head (:data:`RECORD_KEY`)."""
    provider = setup.provider
    try:
        head = provider.head_id()
    except ProviderError:
        return None
    note = provider.records().get(head, {}).get(RECORD_KEY)
    return note if isinstance(note, dict) else None


def started(setup: NodeSetup) -> bool:
    """Whether ``up`` copied the cluster's directory to the current head (and so may have
    started a monitor there)."""
    return _note(setup) is not None


def _push(
    runner: CommandRunner, data: bytes, target: str, log: IO[bytes] | None, tmp_dir: Path
) -> None:
    """Copy ``data`` to ``target`` on the head, through a temporary file (0600) in
    ``tmp_dir`` (the launcher's private cluster directory)."""
    fd, tmp = tempfile.mkstemp(prefix=".push.", dir=tmp_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        runner.sync_up(tmp, target, log)
    finally:
        os.unlink(tmp)


def start(
    config: dict[str, Any],
    setup: NodeSetup,
    interval_s: float,
    echo: Callable[[str], None] = print,
) -> int:
    """Copy the bootstrap config, key and node records to the head and start the
    monitor there; returns its pid on the head once it logged that it runs.

    Raises:
        HeadMonitorError: a copy failed, ``provider.head_python`` is not a command, or
            the monitor exited or hung at start (the message has the last line of its
            log).
    """
    provider = setup.provider
    head, runner = _head(setup)
    d = head_dir(config)
    python = shlex.join(head_python(config))
    state = provider.state_file.name
    provider.record_started(head, {RECORD_KEY: {"dir": d, "pid": None}})
    log_path = setup.log_path(head)
    with open_log(log_path) as log:
        try:
            if runner.run(f"mkdir -p {d} && chmod 700 {d}", log=log) != 0:
                raise CommandError(f"cannot create ~/{d} on the head")
            private = f"bootstrap.yaml {state}"
            if setup.key is not None:  # a provider reaching its nodes itself needs none
                runner.sync_up(str(setup.key), f"{d}/ssh_key", log)
                private = f"ssh_key {private}"
            bootstrap = yaml.safe_dump(head_bootstrap(config), sort_keys=False).encode()
            _push(runner, bootstrap, f"{d}/bootstrap.yaml", log, provider.root)
            records = json.dumps({"nodes": provider.records()}, indent=1).encode()
            _push(runner, records, f"{d}/{state}", log, provider.root)
            cmd = (  # the log exists, 0600, before the monitor appends to it
                f"cd {d} && chmod 600 {private} && "
                "touch monitor.log && chmod 600 monitor.log && "
                f"(setsid nohup {python} -m {MODULE} bootstrap.yaml --interval-s {interval_s} "
                ">> monitor.log 2>&1 < /dev/null & echo $! > monitor.pid)"
            )
            if runner.run(cmd, log=log) != 0:
                raise CommandError(f"starting the monitor on the head failed; see {log_path}")
            pid = int(runner.output(f"cat {d}/monitor.pid").strip())
        except (CommandError, ValueError) as exc:
            raise HeadMonitorError(f"starting the autoscaler on the head failed: {exc}") from None
    provider.record_started(head, {RECORD_KEY: {"dir": d, "pid": pid}})
    marker = started_line(config["cluster_name"], pid)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        text = runner.output(f"cat {d}/monitor.log")
        if marker in text:
            break
        alive = runner.run(f"kill -0 {pid}") == 0
        if not alive or time.monotonic() > deadline:
            tail = " ".join(text.strip().splitlines()[-1:])
            why = "exited" if not alive else "hangs"
            raise HeadMonitorError(
                f"the autoscaler on the head {why} at start ({tail}); see ~/{d}/monitor.log "
                "on the head (is rayfield-autoscaler installed for provider.head_python?)"
            )
        time.sleep(0.2)
    echo(f"the autoscaler runs on the head (pid {pid}); log: ~/{d}/monitor.log there")
    return pid


def running(config: dict[str, Any], setup: NodeSetup) -> bool:
    """Whether the head's monitor runs (False when the head does not answer, or ``up``
    never started one there)."""
    if not started(setup):
        return False
    try:
        _, runner = _head(setup)
        d = head_dir(config)
        check = f"cd {d} && grep -q {MODULE} /proc/$(cat monitor.pid)/cmdline"
        return runner.run(check + " 2>/dev/null") == 0
    except Exception:
        return False


def stop(config: dict[str, Any], setup: NodeSetup) -> bool:
    """Stop the head's monitor (SIGTERM; killed after ``STOP_TIMEOUT_S``); True when one
    was running. A head that does not answer, or where ``up`` never started one, counts
    as none running."""
    if not started(setup):
        return False
    try:
        _, runner = _head(setup)
    except Exception:
        return False
    d = head_dir(config)
    ticks = int(STOP_TIMEOUT_S * 10)
    script = (
        f"cd {d} 2>/dev/null && [ -f monitor.pid ] || exit 0; pid=$(cat monitor.pid); "
        f"rm -f monitor.pid; grep -q {MODULE} /proc/$pid/cmdline 2>/dev/null || exit 0; "
        f"kill -TERM $pid; for i in $(seq {ticks}); do kill -0 $pid 2>/dev/null || break; "
        "sleep 0.1; done; kill -KILL $pid 2>/dev/null; echo stopped"
    )
    try:
        return "stopped" in runner.output(script, timeout_s=STOP_TIMEOUT_S + 30)
    except CommandError:
        return False


def pull_state(config: dict[str, Any], setup: NodeSetup) -> bool:
    """Replace the launcher's node records with the head's (which its monitor keeps);
    True when the head had records. The head's own record stays the launcher's."""
    provider: StatefulProvider = setup.provider
    if not started(setup):
        return False
    try:
        head, runner = _head(setup)
        path = f"{head_dir(config)}/{provider.state_file.name}"
        text = runner.output(f"cat {path} 2>/dev/null || true")
    except Exception:
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return False
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        return False
    mine = provider.records()
    nodes = {k: v for k, v in nodes.items() if k != head}
    if head in mine:
        nodes[head] = mine[head]
    provider.replace_records(nodes)
    return True


def remove(config: dict[str, Any], setup: NodeSetup) -> None:
    """Delete the cluster's directory on the head (its key copy included) when ``up``
    made one; best effort."""
    if not started(setup):
        return
    try:
        head, runner = _head(setup)
        runner.run(f"rm -rf {head_dir(config)}")
        setup.provider.record_started(head, {RECORD_KEY: None})
    except Exception:
        return


def follow_log(config: dict[str, Any], setup: NodeSetup, lines: int, follow: bool) -> int:
    """Print the last ``lines`` lines of the head's monitor log (and follow it) on this
    process's stdout; the exit status of ``tail`` on the head.

    Raises:
        HeadMonitorError: ``up`` did not start a monitor on the current head.
    """
    if not started(setup):
        raise HeadMonitorError(
            f"no autoscaler was started on the head of {config['cluster_name']!r}: "
            "run `rayfield-autoscaler up`"
        )
    _, runner = _head(setup)
    flag = "-F" if follow else ""
    sys.stdout.flush()
    return runner.run(
        f"tail -n {int(lines)} {flag} {head_dir(config)}/monitor.log", log=sys.stdout.buffer
    )
