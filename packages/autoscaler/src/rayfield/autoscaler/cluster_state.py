"""The cluster directory on the launching machine and the node records kept in it, for
the providers that keep their own state (``local_process``, ``local``).

Layout under the cluster directory (``provider.cluster_dir``, default
``<tmp>/rayfield-autoscaler-<uid>/<cluster_name>``, mode 0700)::

    state.json          the nodes: tags and what the provider needs (0600, replaced atomically)
    state.lock          serializes read-modify-write of state.json across processes
    nodes/<node_id>/    the node's logs
"""

from __future__ import annotations

import abc
import contextlib
import copy
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rayfield.autoscaler.node_provider import NodeProvider, ProviderError

__all__ = ["StatefulProvider", "default_cluster_dir", "private_dir", "read_json"]


def default_cluster_dir(cluster_name: str) -> Path:
    """``<tmp>/rayfield-autoscaler-<uid>/<cluster_name>``."""
    return Path(tempfile.gettempdir()) / f"rayfield-autoscaler-{os.getuid()}" / cluster_name


def private_dir(path: Path) -> Path:
    """``path``, created 0700 when missing.

    Raises:
        ProviderError: it exists and another user owns it or may write it.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise ProviderError(
            f"{path} is not yours alone (owner uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}): "
            "choose another provider.cluster_dir"
        )
    return path


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class StatefulProvider(NodeProvider):
    """A provider whose nodes are records (``tags`` and provider fields) in the cluster
    directory's ``state.json``; it implements the tag methods of the interface.

    Args:
        provider_config: the provider section; ``cluster_dir`` overrides the default.
        cluster_name: names the default cluster directory.

    Raises:
        ProviderError: the cluster directory exists and is not this user's alone.
    """

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        given = provider_config.get("cluster_dir")
        self.root = private_dir(
            Path(given).expanduser() if given else default_cluster_dir(cluster_name)
        )
        self._state = self.root / "state.json"
        self._lock = self.root / "state.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The node records, locked; changes made in the block are written back."""
        fd = os.open(self._lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            nodes = (read_json(self._state) or {}).get("nodes", {})
            before = json.dumps(nodes, sort_keys=True)
            yield nodes
            if json.dumps(nodes, sort_keys=True) != before:
                self._write({"nodes": nodes})
        finally:
            os.close(fd)

    def _write(self, state: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".state.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(state, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._state)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _records(self) -> dict[str, dict[str, Any]]:
        with self._locked() as nodes:
            return {k: dict(v) for k, v in nodes.items()}

    @property
    def state_file(self) -> Path:
        """The file the node records are kept in."""
        return self._state

    def records(self) -> dict[str, dict[str, Any]]:
        """Every node record (node id -> tags and provider fields), a copy."""
        return self._records()

    def replace_records(self, nodes: dict[str, dict[str, Any]]) -> None:
        """Replace every node record with ``nodes`` (records kept elsewhere, e.g. by
        the monitor on an SSH cluster's head)."""
        with self._locked() as current:
            current.clear()
            current.update(copy.deepcopy(nodes))

    def _record(self, node_id: str) -> dict[str, Any]:
        rec = self._records().get(node_id)
        if rec is None:
            raise ProviderError(f"cluster {self.cluster_name!r} has no node {node_id!r}")
        return rec

    def head_id(self) -> str:
        """The head's node id.

        Raises:
            ProviderError: the cluster has no head.
        """
        heads = sorted(k for k, rec in self._records().items() if rec.get("head"))
        if not heads:
            raise ProviderError(
                f"cluster {self.cluster_name!r} has no head: workers join a head; run "
                "`rayfield-autoscaler up` first"
            )
        return heads[0]

    def node_dir(self, node_id: str) -> Path:
        """``nodes/<node_id>`` under the cluster directory (created 0700)."""
        return private_dir(self.root / "nodes" / node_id)

    # ---- NodeProvider: listing and tags -------------------------------------------------

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        return sorted(
            node_id
            for node_id, rec in self._records().items()
            if all(rec["tags"].get(k) == v for k, v in tag_filters.items())
        )

    def is_terminated(self, node_id: str) -> bool:
        return node_id not in self._records()

    def node_tags(self, node_id: str) -> dict[str, str]:
        return dict(self._record(node_id)["tags"])

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        with self._locked() as nodes:
            if node_id not in nodes:
                raise ProviderError(f"cluster {self.cluster_name!r} has no node {node_id!r}")
            nodes[node_id]["tags"].update(tags)

    # ---- what the launcher needs to reach the cluster ------------------------------------

    def gcs_address(self, node_id: str) -> str:
        """The GCS address (HOST:PORT) of the head ``node_id``.

        Raises:
            ProviderError: it is not a running head.
        """
        rec = self._record(node_id)
        if not rec.get("gcs_address"):
            raise ProviderError(f"{node_id} is not a running head of {self.cluster_name!r}")
        return str(rec["gcs_address"])

    @abc.abstractmethod
    def token(self, node_id: str) -> str:
        """The cluster token of the head ``node_id``.

        Raises:
            ProviderError: it cannot be read.
        """
