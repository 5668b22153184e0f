"""``rayfield start``: start a head, or a node that joins a cluster."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import click

from rayfield.cli._common import waiting
from rayfield.exceptions import UnsafeSessionError
from rayfield.util import cluster

# Flags of `ray start` (Ray 0.7) that mean nothing here: the message says what to do.
REFUSED = {
    "num_redis_shards": "rayfield has no Redis shards: the GCS keeps its tables in SQLite",
    "redis_shard_ports": "rayfield has no Redis shards: drop the flag",
    "redis_max_clients": "rayfield has no Redis: drop the flag",
    "redis_max_memory": "rayfield has no Redis; task events are kept in a bounded ring",
    "autoscaling_config": "the autoscaler is its own command: rayfield-autoscaler up CONFIG",
    "no_redirect_worker_output": "worker output always goes to <session>/logs and, with "
    "log_to_driver, to the driver: drop the flag",
    "no_redirect_output": "component output always goes to <session>/logs: drop the flag",
    "plasma_store_socket_name": "the store's socket lives in <session>/sockets: drop the flag",
    "raylet_socket_name": "the node's socket lives in <session>/sockets: drop the flag",
    "include_java": "rayfield runs Python workers only",
    "java_worker_options": "rayfield runs Python workers only",
    "internal_config": "there is no internal config; every setting is a flag",
    "load_code_from_local": "code always travels through the GCS function table",
}


def _refuse(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value not in (None, False, ()):
        raise click.UsageError(f"--{param.name.replace('_', '-')}: {REFUSED[param.name]}")
    return value


def _resources(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, float]:
    if not value:
        return {}
    try:
        parsed = json.loads(value)
        if not isinstance(parsed, dict):
            raise ValueError("not a JSON object")
        out = {str(k): float(v) for k, v in parsed.items()}
        bad = [k for k, v in out.items() if not math.isfinite(v) or v < 0]
        if bad:
            raise ValueError(f"{bad[0]!r} must be a finite number >= 0")
        if any(not k.strip() for k in out):
            raise ValueError("a resource name must not be empty")
    except (ValueError, TypeError) as exc:
        raise click.BadParameter(
            f"{value!r} is not a JSON object of numbers ({exc}); e.g. '{{\"tpu\": 2}}'"
        ) from None
    for reserved in ("CPU", "GPU"):
        if reserved in out:
            raise click.BadParameter(f"use --num-{reserved.lower()}s instead of {reserved}")
    return out


def _amount(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise click.BadParameter(f"must be a finite number >= 0, not {value}")
    return value


def _pair(kw: dict[str, Any], cert: str, key: str) -> tuple[str, str] | None:
    if bool(kw[cert]) != bool(kw[key]):
        flags = f"--{cert.replace('_', '-')} and --{key.replace('_', '-')}"
        raise click.UsageError(f"{flags} go together: give both or neither")
    return (kw[cert], kw[key]) if kw[cert] else None


@click.command()
@click.option("--head", is_flag=True, help="Start a new cluster: its GCS and its first node.")
@click.option(
    "--address",
    "--redis-address",
    "address",
    metavar="HOST:PORT",
    help="Join the cluster whose head is at HOST:PORT (required without --head). "
    "--redis-address is the classic name.",
)
@click.option(
    "--port",
    "--redis-port",
    "port",
    type=int,
    default=None,
    help="Head only: TCP port of the GCS (default 6379; 0 picks a free one). "
    "--redis-port is the classic name.",
)
@click.option(
    "--node-ip-address",
    default="127.0.0.1",
    show_default=True,
    help="Address this node listens on and is reached at. Anything but loopback exposes the "
    "node to the network: use with --tls-* or on a trusted network.",
)
@click.option(
    "--node-manager-port",
    type=int,
    default=0,
    help="TCP port of the node's service "
    "(object transfer and forwarded tasks); 0 picks a free one.",
)
@click.option(
    "--object-manager-port",
    type=int,
    default=None,
    help="Accepted for compatibility: objects travel over the node manager port.",
)
@click.option(
    "--num-cpus",
    type=float,
    default=None,
    callback=_amount,
    help="CPUs of this node (default: all).",
)
@click.option(
    "--num-gpus",
    type=float,
    default=None,
    callback=_amount,
    help="GPUs of this node (default: those CUDA_VISIBLE_DEVICES lists, else every NVIDIA GPU).",
)
@click.option(
    "--resources",
    callback=_resources,
    default=None,
    metavar="JSON",
    help="Custom resources, e.g. '{\"tpu\": 2}'.",
)
@click.option(
    "--object-store-memory",
    type=int,
    default=None,
    metavar="BYTES",
    help="Size of this node's object store (default 30% of memory, at most 20 GB).",
)
@click.option(
    "--plasma-directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Back the store with a file in this directory instead of anonymous memory.",
)
@click.option(
    "--huge-pages",
    is_flag=True,
    help="Back the store with huge pages (with --plasma-directory on a hugetlbfs mount).",
)
@click.option(
    "--worker-preload-modules",
    default=None,
    metavar="MODULES",
    help="Comma-separated modules (e.g. torch) that a fork server imports once, so this "
    "node's workers start as forks of it with them imported (default "
    "$RAYFIELD_WORKER_PRELOAD_MODULES; '' turns it off).",
)
@click.option(
    "--metrics-export-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve this node's Prometheus metrics on http://HOST:PORT/metrics (default: a "
    "free port; node.json's metrics_export_address names it).",
)
@click.option(
    "--metrics-export-host",
    default="127.0.0.1",
    show_default=True,
    help="The address /metrics listens on (loopback unless you open it on purpose).",
)
@click.option(
    "--temp-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Root of the session directories (default <tmp>/rayfield-<uid>, created 0700); it "
    "must be yours and not writable by others.",
)
@click.option(
    "--token",
    envvar="RAYFIELD_TOKEN",
    default=None,
    help="The cluster token, to "
    "join from another machine (the head keeps it in <session>/token). Env: "
    "RAYFIELD_TOKEN.",
)
@click.option("--redis-password", default=None, help="Classic name of --token when joining.")
@click.option(
    "--tls-cert",
    envvar="RAYFIELD_TLS_CERT",
    default=None,
    help="PEM certificate of "
    "this node for mutual TLS on every gRPC channel. Env: RAYFIELD_TLS_CERT.",
)
@click.option(
    "--tls-key",
    envvar="RAYFIELD_TLS_KEY",
    default=None,
    help="Its private key. Env: RAYFIELD_TLS_KEY.",
)
@click.option(
    "--tls-ca",
    envvar="RAYFIELD_TLS_CA",
    default=None,
    help="The cluster's CA certificate. Env: RAYFIELD_TLS_CA.",
)
@click.option(
    "--include-dashboard",
    "--include-webui",
    "include_dashboard",
    is_flag=True,
    help="Head only: serve the dashboard, a web page over the cluster's state (needs "
    "rayfield-core[dashboard]); log in with the cluster token.",
)
@click.option(
    "--dashboard-host",
    default="127.0.0.1",
    show_default=True,
    help="Head only: address the dashboard listens on. Anything but loopback exposes it to "
    "the network (it still asks for the token).",
)
@click.option(
    "--dashboard-port",
    type=int,
    default=8265,
    show_default=True,
    help="Head only: TCP port of the dashboard; 0 picks a free one.",
)
@click.option(
    "--dashboard-tls-cert",
    type=click.Path(dir_okay=False),
    default=None,
    help="Head only: serve the dashboard over HTTPS with this PEM certificate (default: the "
    "cluster's --tls-cert when given, else plain HTTP).",
)
@click.option(
    "--dashboard-tls-key",
    type=click.Path(dir_okay=False),
    default=None,
    help="Head only: the private key of --dashboard-tls-cert.",
)
@click.option(
    "--heartbeat-timeout-s",
    type=float,
    default=3.0,
    show_default=True,
    help="Head only: a node silent this long (heartbeats every 0.5 s) is declared dead; its "
    "work is retried elsewhere.",
)
@click.option(
    "--gcs-reconnect-timeout-s",
    type=float,
    envvar="RAYFIELD_GCS_RECONNECT_TIMEOUT_S",
    default=None,
    callback=_amount,
    help="A node that has not reached the GCS this long shuts down with its workers and "
    "actors (default 60; 0: never). Shorter outages (a GCS restart) do not disturb work "
    "between nodes. Env: RAYFIELD_GCS_RECONNECT_TIMEOUT_S.",
)
@click.option(
    "--block",
    is_flag=True,
    help="Stay in the foreground until the node stops, then exit with its status (1: it gave "
    "up on the GCS); Ctrl-C stops what this command started.",
)
@click.option("--num-redis-shards", type=int, hidden=True, callback=_refuse, expose_value=False)
@click.option("--redis-shard-ports", hidden=True, callback=_refuse, expose_value=False)
@click.option("--redis-max-clients", type=int, hidden=True, callback=_refuse, expose_value=False)
@click.option("--redis-max-memory", type=int, hidden=True, callback=_refuse, expose_value=False)
@click.option("--autoscaling-config", hidden=True, callback=_refuse, expose_value=False)
@click.option(
    "--no-redirect-worker-output", is_flag=True, hidden=True, callback=_refuse, expose_value=False
)
@click.option(
    "--no-redirect-output", is_flag=True, hidden=True, callback=_refuse, expose_value=False
)
@click.option("--plasma-store-socket-name", hidden=True, callback=_refuse, expose_value=False)
@click.option("--raylet-socket-name", hidden=True, callback=_refuse, expose_value=False)
@click.option("--include-java", is_flag=True, hidden=True, callback=_refuse, expose_value=False)
@click.option("--java-worker-options", hidden=True, callback=_refuse, expose_value=False)
@click.option("--internal-config", hidden=True, callback=_refuse, expose_value=False)
@click.option(
    "--load-code-from-local", is_flag=True, hidden=True, callback=_refuse, expose_value=False
)
def start(**kw: Any) -> None:
    """Start a rayfield node on this machine.

    With --head, start a new cluster (its GCS, the cluster token and a first node) and
    print the commands that add nodes and connect drivers; on the address of a head that
    was killed (not stopped), restart that cluster: its GCS tables and token come back,
    and its nodes still running carry on. Without it, start a node that
    joins the cluster at --address. Several nodes may run on one machine: each has its
    own store, socket and ports.
    """
    head, address = kw["head"], kw["address"]
    if head and address:
        raise click.UsageError("--address joins an existing cluster: leave it out with --head")
    if not head and not address:
        raise click.UsageError("give --head to start a cluster, or --address HOST:PORT to join one")
    if not head:
        for flag in ("port", "include_dashboard", "dashboard_tls_cert", "dashboard_tls_key"):
            if kw[flag]:
                raise click.UsageError(f"--{flag.replace('_', '-')} is for the head only")
    dashboard_tls = _pair(kw, "dashboard_tls_cert", "dashboard_tls_key")
    if dashboard_tls and not kw["include_dashboard"]:
        raise click.UsageError("--dashboard-tls-cert/--dashboard-tls-key need --include-dashboard")
    if kw["include_dashboard"] and importlib.util.find_spec("aiohttp") is None:
        raise click.UsageError(
            "--include-dashboard needs aiohttp: pip install 'rayfield-core[dashboard]'"
        )
    tls_parts = [kw["tls_cert"], kw["tls_key"], kw["tls_ca"]]
    if any(tls_parts) and not all(tls_parts):
        raise click.UsageError("TLS needs all of --tls-cert, --tls-key and --tls-ca")
    temp_dir = kw["temp_dir"] or cluster.default_temp_dir()
    opts = cluster.NodeOptions(
        num_cpus=kw["num_cpus"],
        num_gpus=kw["num_gpus"],
        resources=kw["resources"],
        object_store_memory=kw["object_store_memory"],
        plasma_directory=kw["plasma_directory"],
        huge_pages=kw["huge_pages"],
        worker_preload_modules=kw["worker_preload_modules"],
        metrics_export_port=kw["metrics_export_port"],
        metrics_export_host=kw["metrics_export_host"],
        temp_dir=temp_dir,
        node_ip_address=kw["node_ip_address"],
        node_manager_port=kw["node_manager_port"],
        heartbeat_timeout_s=kw["heartbeat_timeout_s"],
        gcs_reconnect_timeout_s=kw["gcs_reconnect_timeout_s"],
        tls=(tls_parts[0], tls_parts[1], tls_parts[2]) if all(tls_parts) else None,
        dashboard_tls=dashboard_tls,
    )
    if head and kw["redis_password"]:
        raise click.UsageError(
            "--redis-password: the head creates a 256-bit token itself (<session>/token); "
            "drop the flag"
        )
    token = ""
    if address:
        host, port = _host_port(address)
        try:
            token = kw["token"] or kw["redis_password"] or cluster.find_token(address, temp_dir)
        except cluster.ClusterError as exc:
            raise click.ClickException(str(exc)) from None
        _check_head_answers(address, host, port)
    if kw["node_manager_port"]:
        _check_port_free(kw["node_ip_address"], kw["node_manager_port"])
    try:
        session = cluster.new_session_dir(temp_dir)
    except OSError as exc:
        if isinstance(exc, UnsafeSessionError):
            raise  # a root another user could control: its own message, from the group
        raise click.ClickException(
            f"cannot create a session directory under {temp_dir}: {exc.strerror or exc}; pass "
            "a directory you can write with --temp-dir"
        ) from None
    dashboard_url = ""
    try:
        if head:
            port = 6379 if kw["port"] is None else kw["port"]
            restore = None
            if port:  # the same address as a head that was killed: restart that cluster
                restore = cluster.killed_head(temp_dir, f"{kw['node_ip_address']}:{port}")
            if restore is not None:
                click.echo(
                    f"The head at {kw['node_ip_address']}:{port} was killed (its GCS did not "
                    f"stop): restarting its cluster with the tables and token of {restore}"
                )
            with waiting("starting the GCS"):
                address = cluster.start_gcs(
                    session, kw["node_ip_address"], port, opts, restore=restore
                )
            token = (session / "token").read_text().strip()
        t0 = time.monotonic()
        with waiting("starting the node"):
            info = cluster.start_node(session, address, token, opts, head=head)
        if kw["include_dashboard"]:
            with waiting("starting the dashboard"):
                dashboard_url = cluster.start_dashboard(
                    session, address, kw["dashboard_host"], kw["dashboard_port"], opts
                )
    except cluster.ClusterError as exc:
        cluster.stop_all(5.0, temp_dir=session)  # what this command started before it failed
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:  # Ctrl-C: no half-started cluster is left (then exit 130)
        cluster.stop_all(5.0, temp_dir=session)
        raise
    click.echo(
        f"rayfield node started in {time.monotonic() - t0:.1f} s: {info['node_id'][:12]} "
        f"with {_fmt(info['resources'])}, session {session}"
    )
    if head:
        _print_next_steps(address, session)
    if kw["include_dashboard"]:
        click.echo(
            f"\nThe dashboard is at {dashboard_url} (log in with the token in "
            f"{session / 'token'}; `rayfield dashboard --open` opens it)."
        )
    if info.get("metrics_export_address"):
        click.echo(f"Prometheus metrics: http://{info['metrics_export_address']}/metrics")
    if kw["block"]:
        _block(int(info["pid"]))


def _host_port(address: str) -> tuple[str, int]:
    """``address`` split into host and port.

    Raises:
        click.UsageError: it is not HOST:PORT.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise click.UsageError(f"--address {address!r} is not HOST:PORT, e.g. 127.0.0.1:6379")
    return host.strip("[]"), int(port)


def _check_head_answers(address: str, host: str, port: int) -> None:
    """Fail with one line when nothing listens at ``address``."""
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise click.ClickException(
            f"no rayfield head answers at {address} ({exc.strerror or exc}): check the "
            "address (`rayfield start --head` printed it) and that the head runs"
        ) from None


def _check_port_free(host: str, port: int) -> None:
    """Fail with one line when this node could not listen on ``host:port``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise click.ClickException(
                f"this node cannot listen on {host}:{port} ({exc.strerror or exc}): pick "
                "another --node-manager-port (0: any free one), or check --node-ip-address"
            ) from None


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in resources.items())


def _print_next_steps(address: str, session: Path) -> None:
    click.echo(
        f"\nThe cluster's address is {address}.\n\n"
        f"Add a node on this machine:\n    rayfield start --address {address}\n"
        f"Add a node on another machine (the token is in {session / 'token'}):\n"
        f"    RAYFIELD_TOKEN=<token> rayfield start --address {address} "
        f"--node-ip-address <its IP>\n"
        f'Connect a driver:\n    import rayfield\n    rayfield.init(address="{address}")'
        f'  # or address="auto" on this machine\n'
        f"Stop everything here:\n    rayfield stop"
    )


def _block(pid: int) -> None:
    """Wait for the node process ``pid`` (this command's child) to end, and exit with its
    status (1: it gave up on the GCS); Ctrl-C stops what this command started, exit 0."""
    import psutil

    try:
        status = psutil.Process(pid).wait()  # a child: reaped, not left a zombie
    except psutil.NoSuchProcess:
        status = 0
    except KeyboardInterrupt:
        click.echo("stopping...", err=True)
        cluster.stop_all()
        os._exit(0)
    code = 1 if status is None else status if status >= 0 else 128 - status  # -N: signal N
    click.echo(f"the node (pid {pid}) exited with status {code}", err=True)
    os._exit(code)
