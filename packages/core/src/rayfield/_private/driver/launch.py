"""Start the processes of a cluster node, find running clusters, stop them.

Public as ``rayfield.util.cluster`` (used by ``rayfield start|stop`` of rayfield-cli and
by the tests). A head is a GCS process
(``gcs.server``) and a node process (``node_main``); any other node is a node process.
Each node has its own session directory ``<temp_dir>/session_<time>_<pid>``; a head's
also holds the cluster token (``token``), the GCS tables (``gcs.sqlite``) and
``cluster.json`` (the GCS address), and ``<temp_dir>/session_latest`` points at it. The
default ``temp_dir`` is per user (``<tmp>/rayfield-<uid>``); directories are 0700 and
files 0600, and everything found there is checked before it is trusted
(``session_files``). The processes started here run with umask 077.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from rayfield._private.common import private_files, session_files

ENV_TOKEN = "RAYFIELD_TOKEN"
PROCESS_MODULES = (
    "rayfield._private.node_manager.node_main",
    "rayfield._private.gcs.server",
    "rayfield.dashboard",
)


class ClusterError(RuntimeError):
    """A cluster process could not be started, found or reached; the message says why."""


def default_temp_dir() -> Path:
    """This user's default session root, ``<tmp>/rayfield-<uid>``."""
    return session_files.default_root()


def new_session_dir(temp_dir: Path) -> Path:
    """A new session directory (and ``logs/``) under ``temp_dir``, mode 0700.

    Raises:
        UnsafeSessionError: ``temp_dir`` is not this user's alone (see ``session_files``).
    """
    return session_files.new_session_dir(temp_dir)


@dataclass
class NodeOptions:
    """What ``rayfield start`` was given; see its ``--help``."""

    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: dict[str, float] = field(default_factory=dict)
    object_store_memory: int | None = None
    plasma_directory: str | None = None
    huge_pages: bool = False
    temp_dir: Path = field(default_factory=default_temp_dir)
    node_ip_address: str = "127.0.0.1"
    node_manager_port: int = 0
    tls: tuple[str, str, str] | None = None  # cert, key, ca
    dashboard_tls: tuple[str, str] | None = None  # cert, key of the dashboard's HTTPS
    heartbeat_timeout_s: float = 3.0  # head only: silence after which a node is dead
    heartbeat_s: float | None = None  # seconds between a node's heartbeats (None: 0.5)
    # a node that has not reached the GCS this long stops (0: never; None: the node's
    # default, $RAYFIELD_GCS_RECONNECT_TIMEOUT_S, else 60)
    gcs_reconnect_timeout_s: float | None = None
    # comma-separated modules the node's worker fork server imports ("": none; None: the
    # node's default, $RAYFIELD_WORKER_PRELOAD_MODULES, else none)
    worker_preload_modules: str | None = None
    # the node's Prometheus /metrics endpoint (port 0: a free one; None: the node's
    # default, a free one), on loopback unless another host is given
    metrics_export_port: int | None = None
    metrics_export_host: str = "127.0.0.1"


def _spawn(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with session_files.open_private(log) as out:
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives the command that started it
            env=env,
            umask=0o077,  # what it and its workers write is the user's alone
        )


def _wait_for(
    what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            text = log.read_text(errors="replace") if log.exists() else ""
            known = [ln for ln in text.splitlines() if ln.startswith(session_files.ERROR_MARK)]
            if known:  # a failure with a known remedy: its one line says it all
                raise ClusterError(known[-1][len(session_files.ERROR_MARK) :])
            raise ClusterError(
                f"{what} exited with code {proc.returncode}; its log {log}:\n{text[-2000:]}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            raise ClusterError(f"{what} did not start within {timeout_s:.0f} s; see {log}")
        time.sleep(0.05)


def _tls_args(opts: NodeOptions) -> list[str]:
    if opts.tls is None:
        return []
    cert, key, ca = opts.tls
    return ["--tls-cert", cert, "--tls-key", key, "--tls-ca", ca]


def start_gcs(
    session: Path,
    host: str,
    port: int,
    opts: NodeOptions,
    timeout_s: float = 30,
    restore: Path | None = None,
) -> str:
    """Start the GCS of a new cluster; returns its ``host:port``. Creates the token.

    Args:
        restore: the session of a head whose GCS was killed (:func:`killed_head`): its
            token and database are copied into ``session`` first, so the cluster goes on
            with its tables (nodes, actors, jobs, KV) and the nodes still running keep
            their token.
    """
    from rayfield._private.gcs.auth import create_token_file

    token_file = session / "token"
    if restore is not None:
        _copy_head_state(restore, session)
    else:
        create_token_file(token_file)
    port_file = session / "gcs.port"
    log = session / "logs" / "gcs.out"
    args = ["rayfield._private.gcs.server", "--host", host, "--port", str(port)]
    args += ["--db", str(session / "gcs.sqlite"), "--token-file", str(token_file)]
    args += ["--port-file", str(port_file), *_tls_args(opts)]
    args += ["--heartbeat-timeout-s", str(opts.heartbeat_timeout_s)]
    proc = _spawn(args, log)
    _wait_for(
        "the GCS",
        lambda: port_file.exists() and port_file.read_text().strip() != "",
        proc,
        log,
        timeout_s,
    )
    address = f"{host}:{port_file.read_text().strip()}"
    cluster = {"gcs_address": address, "gcs_pid": proc.pid}
    session_files.write_private(session / "cluster.json", json.dumps(cluster))
    return address


def start_dashboard(
    session: Path, gcs_address: str, host: str, port: int, opts: NodeOptions, timeout_s: float = 30
) -> str:
    """Start the dashboard of the head whose session is ``session``; returns its URL.

    It runs as its own process (``python -m rayfield.dashboard``), listens on
    ``host:port`` (0 picks a free port) and writes ``<session>/dashboard.json``. It serves
    HTTPS with ``opts.dashboard_tls``, else with the cluster's certificate when
    ``opts.tls`` is set, else plain HTTP.

    Raises:
        ClusterError: when it does not start (aiohttp missing, port taken, ...).
    """
    info = session / "dashboard.json"
    log = session / "logs" / "dashboard.out"
    args = ["rayfield.dashboard", "--gcs-address", gcs_address, "--host", host]
    args += ["--port", str(port), "--token-file", str(session / "token")]
    args += ["--session-dir", str(session), *_tls_args(opts)]
    https = opts.dashboard_tls or (opts.tls[:2] if opts.tls else None)
    if https:
        args += ["--https-cert", https[0], "--https-key", https[1]]
    proc = _spawn(args, log)
    _wait_for("the dashboard", info.exists, proc, log, timeout_s)
    return str(json.loads(info.read_text())["url"])


def start_node(
    session: Path,
    gcs_address: str,
    token: str,
    opts: NodeOptions,
    head: bool = False,
    timeout_s: float = 60,
) -> dict[str, Any]:
    """Start a node process that joins the cluster at ``gcs_address``; its node.json."""
    args = ["rayfield._private.node_manager.node_main", "--session-dir", str(session)]
    args += ["--temp-dir", str(opts.temp_dir), "--gcs-address", gcs_address]
    args += ["--node-ip-address", opts.node_ip_address]
    args += ["--node-manager-port", str(opts.node_manager_port)]
    if opts.num_cpus is not None:
        args += ["--num-cpus", str(opts.num_cpus)]
    if opts.num_gpus is not None:
        args += ["--num-gpus", str(opts.num_gpus)]
    if opts.resources:
        args += ["--resources", json.dumps(opts.resources)]
    if opts.object_store_memory:
        args += ["--object-store-memory", str(opts.object_store_memory)]
    if opts.plasma_directory:
        args += ["--plasma-directory", opts.plasma_directory]
    if opts.huge_pages:
        args.append("--huge-pages")
    if head:
        args.append("--head")
    if opts.gcs_reconnect_timeout_s is not None:
        args += ["--gcs-reconnect-timeout-s", str(opts.gcs_reconnect_timeout_s)]
    if opts.heartbeat_s is not None:
        args += ["--heartbeat-s", str(opts.heartbeat_s)]
    if opts.worker_preload_modules is not None:
        args += ["--worker-preload-modules", opts.worker_preload_modules]
    if opts.metrics_export_port is not None:
        args += ["--metrics-export-port", str(opts.metrics_export_port)]
    args += ["--metrics-export-host", opts.metrics_export_host]
    args += _tls_args(opts)
    env = dict(os.environ, **{ENV_TOKEN: token})  # not on the command line: ps shows that
    log = session / "logs" / "node.out"
    node_json = session / "node.json"
    proc = _spawn(args, log, env)
    _wait_for("the node", node_json.exists, proc, log, timeout_s)
    info = session_files.read_json(node_json)
    if info is None:
        raise ClusterError(f"the node wrote no readable {node_json}; see {log}")
    return info


# ---- finding a running cluster -------------------------------------------------------


GCS_DB_FILES = ("gcs.sqlite", "gcs.sqlite-wal", "gcs.sqlite-shm")


def killed_head(temp_dir: Path | None, address: str) -> Path | None:
    """The session of the latest head on this machine if its GCS served ``address`` and
    was killed (gone without stopping cleanly: no ``gcs.sqlite.stopped``), else None.

    ``rayfield start --head`` on that address restarts the cluster from it: the nodes
    that still run reconnect with the same token, and the GCS's tables come back.

    Raises:
        UnsafeSessionError: the session files are not this user's alone.
    """
    session = session_files.latest_session(temp_dir)
    cluster = session_files.read_json(session / "cluster.json") if session else None
    if session is None or cluster is None or cluster.get("gcs_address") != address:
        return None
    pid = cluster.get("gcs_pid")
    if isinstance(pid, int) and _running(pid):
        return None  # still running: starting another head there fails on its port
    db = session / GCS_DB_FILES[0]
    if not db.exists() or (session / (GCS_DB_FILES[0] + session_files.STOPPED_SUFFIX)).exists():
        return None
    session_files.check_owned(session / "token", "the token file")
    session_files.check_owned(db, "the GCS database")
    return session


def _running(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return False
    return not _exited(proc)


def _copy_head_state(old: Path, new: Path) -> None:
    """Copy a killed head's token and GCS database files into the new session (0600)."""
    for name in ("token", *GCS_DB_FILES):
        src = old / name
        if src.exists():
            session_files.check_owned(src, name)
            with private_files.atomic_write(new / name) as out:
                out.write(src.read_bytes())


def head_session(temp_dir: Path | None = None) -> Path | None:
    """The session directory of the latest head on this machine, if one runs.

    Raises:
        UnsafeSessionError: the root, ``session_latest`` or ``cluster.json`` is not this
            user's alone (see ``session_files``).
    """
    session = session_files.latest_session(temp_dir)
    if session is None or session_files.read_json(session / "cluster.json") is None:
        return None
    return session


def find_gcs_address(temp_dir: Path | None = None) -> str:
    """The GCS address of the cluster whose head runs on this machine.

    Raises:
        ClusterError: when no head runs here.
        UnsafeSessionError: its session files are not this user's alone.
    """
    session = head_session(temp_dir)
    cluster = session_files.read_json(session / "cluster.json") if session else None
    if cluster is None:
        raise ClusterError(
            "no running rayfield cluster found on this machine: start one with "
            "'rayfield start --head', or pass its address (HOST:PORT)"
        )
    return str(cluster["gcs_address"])


def find_token(gcs_address: str | None = None, temp_dir: Path | None = None) -> str:
    """The cluster token: $RAYFIELD_TOKEN, else the head's session on this machine.

    Raises:
        ClusterError: when neither has it.
        UnsafeSessionError: the session root, or a session's ``cluster.json`` or
            ``token``, is not this user's alone.
    """
    if os.environ.get(ENV_TOKEN):
        return os.environ[ENV_TOKEN].strip()
    from rayfield._private.gcs.auth import read_token

    root = session_files.existing_root(temp_dir)
    latest = session_files.latest_session(root) if root else None
    candidates = [latest] if latest else []
    candidates += sorted(root.glob("session_*"), reverse=True) if root else []
    for session in candidates:
        cluster = session_files.read_json(session / "cluster.json")
        if cluster is None or not (session / "token").exists():
            continue
        if gcs_address and cluster.get("gcs_address") != gcs_address:
            continue
        session_files.check_owned(session / "token", "the token file")
        return read_token(session / "token")
    raise ClusterError(
        f"no token for the cluster at {gcs_address or '(any)'}: on a machine other than the "
        f"head's pass it with --token or the {ENV_TOKEN} environment variable (the head "
        "keeps it in <session>/token)"
    )


# ---- stopping ------------------------------------------------------------------------


def rayfield_processes(temp_dir: Path | None = None) -> list[psutil.Process]:
    """Node and GCS processes of this user on this machine (workers are their children);
    with ``temp_dir``, only those whose sessions are under it."""
    me = os.getuid()
    prefix = str(temp_dir.resolve()) if temp_dir is not None else None
    found = []
    for proc in psutil.process_iter(["cmdline", "uids"]):
        try:
            cmd = proc.info["cmdline"] or []
            if proc.info["uids"] and proc.info["uids"].real != me:
                continue
            if not any(m in cmd for m in PROCESS_MODULES) or proc.pid == os.getpid():
                continue
            if prefix is None or any(a.startswith(prefix) for a in cmd):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def stop_all(
    grace_s: float = 10.0,
    on_progress: Callable[[str], None] | None = None,
    temp_dir: Path | None = None,
    on_exit: Callable[[psutil.Process], None] | None = None,
) -> int:
    """SIGTERM every node (then GCS) process of this user (under ``temp_dir`` if given),
    SIGKILL what outlives ``grace_s``. Returns how many were stopped. A process counts as
    stopped once it has exited, zombie or reaped (see :func:`wait_exited`).

    ``on_progress`` is told after each group (nodes, GCS) in words; ``on_exit`` is called
    with each process as it exits or is killed (e.g. to advance a progress bar)."""
    procs = rayfield_processes(temp_dir)
    # Nodes first (they stop their workers and leave the cluster), then the dashboard
    # (it reads the GCS), then the GCS.
    nodes = [p for p in procs if "rayfield._private.node_manager.node_main" in p.cmdline()]
    dashboards = [p for p in procs if "rayfield.dashboard" in p.cmdline()]
    gcs = [p for p in procs if p not in nodes and p not in dashboards]
    stopped = 0
    for group in (nodes, dashboards, gcs):
        for p in group:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                continue
        alive = wait_exited(group, grace_s, on_exit)
        for p in alive:
            try:
                for child in p.children(recursive=True):
                    child.kill()
                p.kill()
            except psutil.NoSuchProcess:
                pass
            if on_exit:
                on_exit(p)
        stopped += len(group)
        if on_progress and group:
            kind = "node" if group is nodes else "dashboard" if group is dashboards else "GCS"
            on_progress(f"stopped {len(group)} {kind} process{'es' if len(group) > 1 else ''}")
    return stopped


def _exited(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:  # reaped (or its pid reused by another process's start)
        return True


def wait_exited(
    procs: list[psutil.Process],
    timeout_s: float,
    on_exit: Callable[[psutil.Process], None] | None = None,
    poll_s: float = 0.02,
) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` seconds for ``procs`` to exit; returns the ones still
    running. A zombie counts as exited: a stopped node's processes are reparented to
    init, which on some machines reaps them only every second or two, and
    ``psutil.wait_procs`` would wait for that. ``on_exit`` is called once per process
    that exits (polled every ``poll_s`` seconds)."""
    deadline = time.monotonic() + timeout_s
    alive = list(procs)
    while True:
        still = []
        for p in alive:
            if not _exited(p):
                still.append(p)
            elif on_exit is not None:
                on_exit(p)
        alive = still
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(poll_s)
