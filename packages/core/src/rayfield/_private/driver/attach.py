"""How a driver attaches to a node started elsewhere (``init(address=...)``): by a GCS
address, one of the cluster's alive nodes on this machine whose socket belongs to this
user (the one on this network namespace's address, when there are several); else the
node of a session directory, socket or ``"auto"``."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rayfield._private import context
from rayfield._private.common import session_files
from rayfield._private.common.events import EventLog
from rayfield._private.common.init_context import InitContext
from rayfield._private.context import Mode, ProcessContext
from rayfield._private.driver import runtime_env_packages
from rayfield._private.runtime import runtime as _rt


class _Addressed(Protocol):
    @property
    def address(self) -> str: ...  # HOST:PORT


_Node = TypeVar("_Node", bound=_Addressed)


def local_node_of_cluster(address: str, root: Path) -> tuple[str, Path, str]:
    """The socket, session and IP address of a node of the cluster at ``address`` on this
    machine (see :func:`pick_local`)."""
    from rayfield._private.driver.launch import find_token
    from rayfield._private.gcs.client import GcsClient

    gcs = GcsClient(address, find_token(address, root), retry_deadline_s=10)
    try:
        nodes = [n for n in gcs.get_nodes() if n.alive and os.path.exists(n.socket_path)]
    finally:
        gcs.close()
    mine = [n for n in nodes if own_socket(n.socket_path)]
    if not mine:
        others = " (those here belong to other users)" if nodes else ""
        raise ConnectionError(
            f"the cluster at {address} has no node of yours on this machine{others}: a "
            f"driver needs a local node; start one with 'rayfield start --address {address}'"
        )
    node = pick_local(mine, is_own_address)
    return node.socket_path, Path(node.session_dir), node_host(node.address)


def pick_local(nodes: Sequence[_Node], own: Callable[[str], bool]) -> _Node:
    """Of ``nodes`` (each with ``.address``, ``HOST:PORT``) whose sockets this process
    can reach, the first whose host ``own(host)`` says is an address of this process's
    network namespace, else the first. Nodes in other network namespaces of one machine
    (containers, ``ip netns``) share its files and so their sockets: the driver attaches
    to the node on its own network, as it would on a machine of its own."""
    for node in nodes:
        if own(node_host(node.address)):
            return node
    return nodes[0]


def node_host(address: str) -> str:
    """The host of ``HOST:PORT`` (brackets of an IPv6 host removed)."""
    return address.rpartition(":")[0].strip("[]")


def is_own_address(host: str) -> bool:
    """Whether ``host`` (an IP address) is one of this network namespace's: a socket can
    be bound to it here."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((host, 0))
    except (OSError, ValueError):  # not here (EADDRNOTAVAIL), or not an IP address
        return False
    return True


def own_socket(path: str) -> bool:
    """Whether ``path`` is a node socket this user owns (False when gone or another
    user's)."""
    from rayfield._private.common import session_files

    try:
        session_files.check_socket(path)
    except OSError:  # gone, or another user's (UnsafeSessionError)
        return False
    return True


def dashboard_url(gcs_address: str | None) -> str | None:
    """The URL the cluster's dashboard published in its GCS (None: it has none)."""
    if not gcs_address:
        return None
    from rayfield._private.driver.names import client

    try:
        url = client(gcs_address).kv_get("dashboard", b"url")
    except Exception:  # the URL is information only; the driver works without it
        return None
    return url.decode() if url else None


def connect(address: str, temp_dir: str | None, job_env: Any = ({}, {})) -> InitContext:
    """Connect this driver to a node started elsewhere (``rayfield start``, or ``python -m
    rayfield._private.node_manager.node_main``): a GCS address ``host:port`` (a node of
    that cluster on this machine), ``"auto"`` (the latest session under `temp_dir`), a
    session directory, or the node's socket path."""
    root = Path(temp_dir) if temp_dir else session_files.default_root()
    cluster: dict[str, str] = {}
    node_ip = "127.0.0.1"
    if re.fullmatch(r"[^/\s]+:\d+", address):
        socket_path, session, node_ip = local_node_of_cluster(address, root)
        cluster = {"gcs_address": address, "temp_dir": str(root)}
    else:  # every file and socket it finds is checked first (session_files)
        socket_path, session, node = session_files.find_node(address, root)
        if node.get("gcs_address"):  # a node of a cluster (e.g. address="auto")
            cluster = {"gcs_address": node["gcs_address"], "temp_dir": str(root)}
    runtime = _rt.StoreRuntime(socket_path, is_worker=False)
    runtime.events = EventLog(session / "logs")
    info = InitContext(
        node_ip_address=node_ip,
        session_dir=str(session),
        object_store_address=socket_path,
        webui_url=dashboard_url(cluster.get("gcs_address")),
        connected=True,
        **cluster,
    )
    context.install(ProcessContext(Mode.CONNECTED, runtime, info, None, runtime.ids.job_id))
    runtime_env_packages.set_job_env(runtime, job_env)
    if cluster:
        from rayfield._private.driver import jobs

        jobs.start(cluster["gcs_address"], runtime.ids.job_id, runtime.client.node_id)
    return info
