"""A node in its own process, that drivers connect to with ``init(address=...)``.

    python -m rayfield._private.node_manager.node_main [--num-cpus N] [--num-gpus N]
        [--resources JSON] [--object-store-memory BYTES] [--temp-dir DIR]
        [--session-dir DIR] [--gcs-address HOST:PORT --token-file PATH
         [--node-ip-address IP] [--node-manager-port P] [--tls-cert F --tls-key F --tls-ca F]
         [--gcs-reconnect-timeout-s S]]

It creates a session directory (or uses ``--session-dir``), writes ``<session>/node.json``
(socket path, resources, pid, and in a cluster the node's gRPC address) and, unless it
joins a cluster as a non-head node, points ``<temp_dir>/session_latest`` at the session.
With ``--gcs-address`` it joins that cluster (``agent.NodeAgent``). It prints one
line with the session directory and serves until SIGTERM or SIGINT, then stops its
workers, leaves the cluster and removes its socket (exit status 0). A node in a cluster
also stops so, with exit status 1, when it has not reached the GCS for
``--gcs-reconnect-timeout-s`` seconds (default ``RAYFIELD_GCS_RECONNECT_TIMEOUT_S``, else
60; 0: never; see ``gcs_reach.py``). ``rayfield start`` runs it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from rayfield._private.common import session_files
from rayfield._private.common.devices import detect_gpus
from rayfield._private.common.preload import ENV_PRELOAD, resolve_modules
from rayfield._private.node_manager.gcs_reach import (
    DEFAULT_GCS_RECONNECT_TIMEOUT_S,
    ENV_GCS_RECONNECT_TIMEOUT_S,
    reconnect_timeout_from_env,
)
from rayfield._private.node_manager.node import Node


def join_cluster(
    node: Node, args: argparse.Namespace, on_gcs_gone: Callable[[str], None]
) -> dict[str, str]:
    """Start the node's cluster agent (imports grpc only here: plain nodes never need it);
    ``on_gcs_gone`` is called when the node gives up on the GCS."""
    from rayfield._private.gcs.auth import read_token
    from rayfield._private.gcs.client import GcsClient
    from rayfield._private.node_manager.agent import NodeAgent
    from rayfield._private.transport import TlsConfig

    token = os.environ.get("RAYFIELD_TOKEN") or read_token(args.token_file)
    tls = TlsConfig(args.tls_cert, args.tls_key, args.tls_ca) if args.tls_cert else None
    gcs = GcsClient(args.gcs_address, token, tls=tls if tls else None)
    node.agent = NodeAgent(
        node,
        gcs,
        token,
        host=args.node_ip_address,
        port=args.node_manager_port,
        tls=tls,
        heartbeat_s=args.heartbeat_s,
        gcs_reconnect_timeout_s=args.gcs_reconnect_timeout_s,
        on_gcs_gone=on_gcs_gone,
    )
    return {"gcs_address": args.gcs_address, "node_manager_address": node.agent.address}


def start_metrics(node: Node, args: argparse.Namespace) -> str:
    """Serve the node's ``/metrics``; returns its ``HOST:PORT``."""
    gcs = getattr(node.agent, "gcs", None)
    head = args.head or not args.gcs_address
    return node.export_metrics(args.metrics_export_port, args.metrics_export_host, gcs, head)


def _join_failure(exc: BaseException, address: str) -> str | None:
    """One line saying why joining the cluster at ``address`` failed, for the failures
    with a known remedy; None for others (their traceback goes to the log)."""
    from rayfield._private.protocol.errors import GcsAuthError, GcsUnavailableError

    if isinstance(exc, GcsAuthError):
        return (
            f"the head at {address} refused this node's token: pass the cluster's token "
            "with --token or RAYFIELD_TOKEN"
        )
    if isinstance(exc, GcsUnavailableError):
        return (
            f"no rayfield head answers at {address}: check the address (`rayfield start "
            "--head` printed it) and that the head runs"
        )
    return None


def node_resources(
    num_cpus: float | None, num_gpus: float | None, custom: dict[str, float]
) -> dict[str, float]:
    """The node's resources: ``CPU`` (default: the machine's CPUs), ``GPU`` when it has any
    (default: :func:`~rayfield._private.common.devices.detect_gpus`), then ``custom``."""
    resources = {"CPU": float(num_cpus if num_cpus is not None else os.cpu_count() or 1)}
    gpus = num_gpus if num_gpus is not None else detect_gpus()
    if gpus:
        resources["GPU"] = float(gpus)
    resources.update({k: float(v) for k, v in custom.items()})
    return resources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-cpus", type=float, default=None)
    parser.add_argument(
        "--num-gpus", type=float, default=None, help="default: the GPUs detect_gpus() finds"
    )
    parser.add_argument("--resources", type=json.loads, default={}, help='e.g. {"tpu": 2}')
    parser.add_argument("--object-store-memory", type=int, default=None)
    parser.add_argument("--temp-dir", type=Path, default=None, help="default <tmp>/rayfield-<uid>")
    parser.add_argument("--session-dir", type=Path, default=None)
    parser.add_argument("--plasma-directory", default=None)
    parser.add_argument("--huge-pages", action="store_true")
    parser.add_argument("--gcs-address", default=None, help="HOST:PORT of the cluster's GCS")
    parser.add_argument("--token-file", type=Path, default=None)
    parser.add_argument("--node-ip-address", default="127.0.0.1")
    parser.add_argument("--node-manager-port", type=int, default=0)
    parser.add_argument("--head", action="store_true", help="point session_latest here")
    parser.add_argument(
        "--heartbeat-s",
        type=float,
        default=0.5,
        help="seconds between heartbeats (a demand that grew goes out at once); keep it "
        "well under the GCS's --heartbeat-timeout-s",
    )
    parser.add_argument(
        "--gcs-reconnect-timeout-s",
        type=float,
        default=None,
        help="stop after this long without reaching the GCS (0: never); default "
        f"${ENV_GCS_RECONNECT_TIMEOUT_S}, else {DEFAULT_GCS_RECONNECT_TIMEOUT_S:g}",
    )
    parser.add_argument(
        "--worker-preload-modules",
        default=None,
        help=f"comma-separated modules workers start with (default ${ENV_PRELOAD})",
    )
    parser.add_argument(
        "--metrics-export-port", type=int, default=0, help="/metrics port (0: a free one; -1: off)"
    )
    parser.add_argument("--metrics-export-host", default="127.0.0.1", help="/metrics address")
    for flag in ("--tls-cert", "--tls-key", "--tls-ca"):
        parser.add_argument(flag, default=None)
    args = parser.parse_args(argv)
    if not args.heartbeat_s > 0:
        parser.error(f"--heartbeat-s {args.heartbeat_s}: give a positive number of seconds")
    try:
        preload = resolve_modules(args.worker_preload_modules)
    except ValueError as exc:
        parser.error(str(exc))
    if args.gcs_reconnect_timeout_s is None:
        try:
            args.gcs_reconnect_timeout_s = reconnect_timeout_from_env()
        except ValueError as exc:
            parser.error(str(exc))
    logging.basicConfig(
        level=os.environ.get("RAYFIELD_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    resources = node_resources(args.num_cpus, args.num_gpus, args.resources)
    memory = args.object_store_memory or min(int(psutil.virtual_memory().total * 0.3), 20 * 10**9)
    os.umask(0o077)  # the node's files and its workers' are the user's alone
    root = session_files.ensure_root(args.temp_dir)
    if args.session_dir:
        session = args.session_dir
        session_files.check_owned(session, "the session directory")
    else:
        session = session_files.new_session_dir(root)
    if args.gcs_address:  # its workers know they are in a cluster (GCS, named actors)
        os.environ["RAYFIELD_GCS_ADDRESS"] = args.gcs_address
        # and where they serve direct calls of their actors (runtime/direct_server.py)
        os.environ["RAYFIELD_NODE_IP"] = args.node_ip_address
        if args.tls_cert:  # and reach its GCS with the node's certificate
            from rayfield._private.transport import ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY

            os.environ[ENV_TLS_CERT], os.environ[ENV_TLS_KEY] = args.tls_cert, args.tls_key
            os.environ[ENV_TLS_CA] = args.tls_ca
    node = Node(
        session,
        resources,
        memory,
        args.plasma_directory,
        args.huge_pages,
        log_to_driver=False,
        worker_preload_modules=preload,
    )
    info = {
        "socket": node.socket_path,
        "resources": resources,
        "pid": os.getpid(),
        "object_store_memory": memory,
        "node_id": node.server.node_id.hex(),
    }
    stop = threading.Event()
    gave_up: list[str] = []

    def give_up(why: str) -> None:
        gave_up.append(why)
        stop.set()

    if args.gcs_address:
        try:
            info.update(join_cluster(node, args, give_up))
        except BaseException as exc:
            node.shutdown()
            reason = _join_failure(exc, args.gcs_address)
            if reason is None:
                raise
            # `rayfield start` shows this one line instead of the log.
            print(f"{session_files.ERROR_MARK}{reason}", flush=True)
            return 2
    if args.metrics_export_port >= 0:
        info["metrics_export_address"] = start_metrics(node, args)
    session_files.write_private(session / "node.json", json.dumps(info))
    if args.head or not args.gcs_address:
        session_files.point_latest(root, session)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"rayfield node started: session {session}", flush=True)
    while not stop.wait(0.5):
        pass
    node.shutdown()
    (session / "node.json").unlink(missing_ok=True)
    if gave_up:
        print(f"rayfield node stopped: {gave_up[0]}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    from rayfield._private.common.fast_exit import exit_now

    exit_now(main())  # the node stopped its parts itself: no interpreter teardown
