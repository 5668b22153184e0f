"""What the launcher commands do (``up``, ``down``, ``exec``, ``submit``, the IP
queries), apart from their command-line parsing (``cli.py``).

``up`` bootstraps the config through the provider's ``bootstrap_config`` (keys,
security groups, service accounts), starts the head through the provider, writes the
prepared config as ``<cluster_dir>/bootstrap.yaml`` (0600) and starts the cluster's
monitor process (``python -m rayfield.autoscaler.monitor``), which launches
``min_workers`` and autoscales. Where the monitor runs is :func:`head_monitor_setup`'s
decision: on a ``local_process`` cluster on this machine (its log
``<cluster_dir>/monitor.log``, its pid ``monitor.pid``, both 0600 and kept through
:mod:`rayfield.util.private_files` like every file of the cluster directory); on a
cluster whose nodes are
set up over SSH (``local``, or any provider whose nodes are reached over SSH: its
launcher state is kept by :class:`~rayfield.autoscaler.launcher_state.SSHClusterProvider`)
on the head, as in the reference, with the bootstrap config, key and node records
copied there (:mod:`rayfield.autoscaler.head_monitor`); ``down`` stops it and pulls the
node records back before terminating the nodes. This machine need not stay up.
``exec`` and ``submit`` run on the head, which for ``local_process`` is this machine:
on an SSH cluster they run over SSH. The command gets ``RAYFIELD_ADDRESS`` (the GCS),
``RAYFIELD_TOKEN`` and ``RAYFIELD_HEAD_IP`` in its environment, so ``rayfield.init()``
joins the cluster.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import yaml

from rayfield.autoscaler import head_monitor
from rayfield.autoscaler.autoscaler import node_config, node_tags
from rayfield.autoscaler.cluster_state import StatefulProvider, UnsafeFileError, open_log
from rayfield.autoscaler.config import launch_hash
from rayfield.autoscaler.head_monitor import started_line
from rayfield.autoscaler.launcher_state import SSHClusterProvider
from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    KIND_WORKER,
    STATUS_UNINITIALIZED,
    STATUS_UP_TO_DATE,
    TAG_LAUNCH_CONFIG,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    TAG_RUNTIME_CONFIG,
    NodeProvider,
    ProviderError,
    get_node_provider,
    provider_class,
)
from rayfield.autoscaler.node_setup import NodeSetup
from rayfield.autoscaler.updater import UpdateError
from rayfield.util import private_files

__all__ = [
    "HeadSetupError",
    "LauncherError",
    "create_or_update",
    "exec_cluster",
    "head_node",
    "monitor_log",
    "teardown",
    "worker_nodes",
]

MONITOR_MODULE = "rayfield.autoscaler.monitor"
DEFAULT_UPDATE_INTERVAL_S = 5.0
MONITOR_START_TIMEOUT_S = 60.0
DEFAULT_SSH_TIMEOUT_S = 120.0


class LauncherError(RuntimeError):
    """A launcher command could not do what was asked; the message says why."""


class HeadSetupError(LauncherError):
    """Setting the head up over SSH failed (it was not reachable, or a step failed).

    Attributes:
        node_id: the provider's id of the head.
        host: the address the launcher reached it at (None when it had none).
    """

    def __init__(self, message: str, node_id: str, host: str | None) -> None:
        super().__init__(message)
        self.node_id = node_id
        self.host = host


def provider_for(config: dict[str, Any]) -> StatefulProvider:
    """The cluster's provider: ``local_process`` and ``local`` keep their own state; any
    other provider's nodes are set up over SSH, with the launcher's state kept by an
    :class:`SSHClusterProvider` around it.

    Raises:
        ProviderError: the provider cannot be made.
        UnsafeFileError: its cluster directory (or one above it) is not this user's alone.
    """
    provider: NodeProvider = get_node_provider(config["provider"], config["cluster_name"])
    if isinstance(provider, StatefulProvider):
        return provider
    return SSHClusterProvider(provider)


def head_node(provider: NodeProvider) -> str | None:
    """The head's node id, or None when the cluster has no head."""
    heads = provider.non_terminated_nodes({TAG_NODE_KIND: KIND_HEAD})
    return heads[0] if heads else None


def worker_nodes(provider: NodeProvider) -> list[str]:
    """The workers' node ids (pending and running)."""
    return provider.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})


def monitor_log(provider: StatefulProvider) -> Path:
    """The monitor's log file."""
    return provider.root / "monitor.log"


def _monitor_pid(provider: StatefulProvider) -> int | None:
    """The pid in ``monitor.pid`` when that process is a monitor; None otherwise.

    Raises:
        UnsafeFileError: ``monitor.pid`` is not this user's alone.
    """
    try:
        pid = int(private_files.read_text(provider.root / "monitor.pid", max_bytes=64))
        proc = psutil.Process(pid)
        if MONITOR_MODULE in proc.cmdline() and proc.status() != psutil.STATUS_ZOMBIE:
            return pid
    except UnsafeFileError:
        raise
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def stop_monitor(provider: StatefulProvider, grace_s: float = 150.0) -> bool:
    """Stop the cluster's monitor process; True when one was running.

    The monitor finishes the launches it has started (each at most the provider's start
    timeout) before it exits, so that no node starts after ``down`` has listed them;
    ``grace_s`` bounds that wait before it is killed."""
    pid = _monitor_pid(provider)
    if pid is None:
        return False
    proc = psutil.Process(pid)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(grace_s)
    (provider.root / "monitor.pid").unlink(missing_ok=True)
    return True


def _start_monitor(provider: StatefulProvider, bootstrap: Path, interval_s: float) -> int:
    log = monitor_log(provider)
    with open_log(log) as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", MONITOR_MODULE, str(bootstrap), "--interval-s", str(interval_s)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    private_files.write_text(provider.root / "monitor.pid", str(proc.pid))
    marker = started_line(provider.cluster_name, proc.pid)
    deadline = time.monotonic() + MONITOR_START_TIMEOUT_S
    while marker not in (text := private_files.read_bytes(log).decode(errors="replace")):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = text.strip().splitlines()[-1:]
            why = f"exited with status {proc.returncode}" if proc.poll() is not None else "hangs"
            raise LauncherError(f"the autoscaler {why} at start ({' '.join(tail)}); see {log}")
        time.sleep(0.1)
    return proc.pid


def create_or_update(
    config: dict[str, Any],
    no_restart: bool = False,
    restart_only: bool = False,
    update_interval_s: float = DEFAULT_UPDATE_INTERVAL_S,
    echo: Callable[[str], None] = print,
    ssh_timeout_s: float = DEFAULT_SSH_TIMEOUT_S,
) -> str:
    """Bring the cluster up, or update a running one; returns the head's node id.

    A head whose launch-config hash is outdated is replaced (its workers go with it);
    a current one is kept. Unless ``no_restart``, the monitor is (re)started so that it
    reads the new config. ``ssh_timeout_s`` bounds the wait for an SSH head's sshd.

    Raises:
        LauncherError: ``no_restart`` and ``restart_only`` are both set.
        HeadSetupError: the head did not answer SSH within ``ssh_timeout_s`` or a setup
            step failed (the message names its address and its log).
        ProviderError: the head could not be started, or bootstrapping failed.
    """
    if no_restart and restart_only:
        raise LauncherError("--no-restart and --restart-only exclude each other: pick one")
    config = provider_class(config["provider"]).bootstrap_config(config)
    provider = provider_for(config)
    head_type = config["head_node_type"]
    head = head_node(provider)
    if head is not None and (
        provider.node_tags(head).get(TAG_LAUNCH_CONFIG) != launch_hash(config, head_type)
        or not provider.is_running(head)
    ):
        echo(f"replacing the head {head}: its launch config changed or it stopped")
        teardown(config, workers_only=False, echo=echo)
        head = None
    if head is None:
        echo(f"starting the head of {config['cluster_name']!r} (type {head_type})")
        status = STATUS_UNINITIALIZED if provider.needs_setup else STATUS_UP_TO_DATE
        provider.create_node(
            node_config(config, head_type), node_tags(config, head_type, True, status), 1
        )
        head = head_node(provider)
        if head is None:
            raise ProviderError("the head was created but the provider does not list it")
    elif not provider.needs_setup:  # an SSH head's setup is checked below
        echo(f"the head {head} is up to date")
    setup = node_setup(config, provider, ssh_timeout_s)
    on_head = head_monitor_setup(provider, setup)
    keep = False  # --no-restart: a monitor running on the head is kept
    if on_head is not None:
        stop_monitor(provider)  # a monitor this machine ran for the cluster before
        keep = no_restart and head_monitor.running(config, on_head)
        if not keep and head_monitor.stop(config, on_head):
            echo("stopped the autoscaler on the head (no node changes while it is set up)")
        head_monitor.pull_state(config, on_head)
        _set_up_head(on_head, head, restart_only, echo)
    _write_private(provider.root / "bootstrap.yaml", config)
    if on_head is not None:
        if not keep:
            try:
                head_monitor.start(config, on_head, update_interval_s, echo)
            except head_monitor.HeadMonitorError as exc:
                raise LauncherError(str(exc)) from None
    elif not no_restart or _monitor_pid(provider) is None:
        stop_monitor(provider)
        pid = _start_monitor(provider, provider.root / "bootstrap.yaml", update_interval_s)
        echo(f"the autoscaler runs (pid {pid}); follow it with: rayfield-autoscaler monitor")
    echo(f"head {head} at {provider.gcs_address(head)}; cluster dir {provider.root}")
    return head


def node_setup(
    config: dict[str, Any],
    provider: StatefulProvider,
    ssh_timeout_s: float = DEFAULT_SSH_TIMEOUT_S,
) -> NodeSetup | None:
    """The cluster's :class:`NodeSetup` when its provider sets nodes up over SSH."""
    if not provider.needs_setup:
        return None
    if not provider.runs_commands and not config.get("auth", {}).get("ssh_private_key"):
        # A cloud's key is named by its bootstrap: the one `up` used, else bootstrap now.
        stored = provider.root / "bootstrap.yaml"
        used = yaml.safe_load(private_files.read_text(stored)) if stored.is_file() else None
        if isinstance(used, dict) and used.get("auth", {}).get("ssh_private_key"):
            config = {**config, "auth": used["auth"]}
        else:
            config = provider_class(config["provider"]).bootstrap_config(config)
    from rayfield.autoscaler.local import LocalNodeProvider

    assert isinstance(provider, (LocalNodeProvider, SSHClusterProvider))
    return NodeSetup(config, provider, ssh_timeout_s=ssh_timeout_s)


def head_monitor_setup(provider: StatefulProvider, setup: NodeSetup | None) -> NodeSetup | None:
    """Where the cluster's monitor runs: ``setup`` (run it on the head, reached through
    that setup) when the provider's nodes are set up over SSH (``local``, and ``aws``,
    ``gcp``, ``kubernetes``, ``external`` through :class:`SSHClusterProvider`), as in
    the reference: the head reaches the workers inside the cluster and the launching
    machine need not stay up. None (run it on this machine) when the nodes are processes
    here (``local_process``, ``setup`` None). Pure: reads only ``provider.needs_setup``."""
    if setup is None or not provider.needs_setup:
        return None
    return setup


def _write_private(path: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` as YAML to ``path`` (0600, replaced atomically).

    Raises:
        UnsafeFileError: the directory is not this user's alone.
    """
    private_files.write_text(path, yaml.safe_dump(config, sort_keys=False))
    return path


def _set_up_head(
    setup: NodeSetup, head: str, restart_only: bool, echo: Callable[[str], None]
) -> None:
    """Set the head up over SSH when it is new, failed, or its runtime config (commands,
    file mounts' contents) changed; with ``restart_only``, run its start commands.

    Raises:
        HeadSetupError: the head is unreachable or a step failed.
    """
    provider = setup.provider
    tags = provider.node_tags(head)
    current = tags.get(TAG_NODE_STATUS) == STATUS_UP_TO_DATE
    same = tags.get(TAG_RUNTIME_CONFIG) == setup.runtime_hashes[KIND_HEAD]
    if current and not restart_only and same:
        echo(f"the head {head} is up to date")
        return
    what = "restarting" if restart_only else "setting up"
    host = setup.ssh_ip(head)
    over = "through the provider" if provider.runs_commands else "over SSH"
    echo(f"{what} the head {head} at {host} {over} (log: {setup.log_path(head)})")
    try:
        setup.update(head, restart_only=restart_only)
    except (UpdateError, ProviderError) as exc:
        raise HeadSetupError(f"the head {head} at {host}: {exc}", head, host) from None


def teardown(
    config: dict[str, Any], workers_only: bool = False, echo: Callable[[str], None] = print
) -> int:
    """Stop the monitor (unless ``workers_only``) and terminate the workers, then the
    head and what the provider kept for the cluster (``remove_cluster``: the Kubernetes
    token's Secret) unless ``workers_only``. Returns how many nodes were terminated."""
    provider = provider_for(config)
    setup = node_setup(config, provider)
    if not workers_only and stop_monitor(provider):
        echo("stopped the autoscaler")
    on_head = head_monitor_setup(provider, setup)
    if on_head is not None:
        if not workers_only and head_monitor.stop(config, on_head):
            echo("stopped the autoscaler on the head")
        head_monitor.pull_state(config, on_head)
    nodes = worker_nodes(provider)
    head = head_node(provider)
    if head is not None and not workers_only:
        nodes.append(head)
        if on_head is not None:
            head_monitor.remove(config, on_head)
    for node_id in nodes:
        echo(f"terminating {node_id}")
        if setup is not None and not setup.stop(node_id):
            echo(f"  stopping rayfield on {node_id} failed; see {setup.log_path(node_id)}")
        provider.terminate_node(node_id)
    if not workers_only:
        provider.remove_cluster()  # what the provider kept for the cluster (its token)
    return len(nodes)


def cluster_env(config: dict[str, Any]) -> dict[str, str]:
    """The environment a command on the head gets to reach the cluster.

    Raises:
        LauncherError: the cluster has no running head.
    """
    provider = provider_for(config)
    head = head_node(provider)
    if head is None or not provider.is_running(head):
        raise LauncherError(
            f"cluster {config['cluster_name']!r} is not up: run `rayfield-autoscaler up` "
            "(or pass --start)"
        )
    try:
        return {
            "RAYFIELD_ADDRESS": provider.gcs_address(head),
            "RAYFIELD_TOKEN": provider.token(head),
            "RAYFIELD_HEAD_IP": provider.internal_ip(head) or "127.0.0.1",
        }
    except ProviderError as exc:
        raise LauncherError(
            f"the head is not started ({exc}): run `rayfield-autoscaler up`"
        ) from None


def exec_cluster(
    config: dict[str, Any], cmd: list[str] | str, timeout_s: float | None = None
) -> int:
    """Run ``cmd`` (a shell string or an argv list) on the head; its exit status. On an
    SSH cluster it runs over SSH, its output on this process's stdout.

    Raises:
        LauncherError: the cluster has no running head.
    """
    env = cluster_env(config)
    provider = provider_for(config)
    setup = node_setup(config, provider)
    if setup is not None:
        head = head_node(provider)
        assert head is not None
        line = cmd if isinstance(cmd, str) else shlex.join(cmd)
        sys.stdout.flush()
        return setup.runner(head).run(line, env, sys.stdout.buffer, timeout_s)
    full = {**os.environ, **env}
    proc = subprocess.run(cmd, shell=isinstance(cmd, str), env=full, timeout=timeout_s, check=False)
    return proc.returncode
