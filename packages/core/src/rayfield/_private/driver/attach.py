"""The node a driver attaches to when it connects to a cluster by its GCS address: one
of the cluster's alive nodes on this machine whose socket belongs to this user."""

from __future__ import annotations

import os
from pathlib import Path


def local_node_of_cluster(address: str, root: Path) -> tuple[str, Path]:
    """The socket and session of a node of the cluster at ``address`` on this machine."""
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
    return mine[0].socket_path, Path(mine[0].session_dir)


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
