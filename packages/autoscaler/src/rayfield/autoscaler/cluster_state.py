"""The cluster directory on the launching machine and the node records kept in it, for
the providers that keep their own state (``local_process``, ``local``, and the launcher's
state of the others, :mod:`rayfield.autoscaler.launcher_state`).

Layout (``provider.cluster_dir``, default ``<tmp>/rayfield-autoscaler-<uid>/<cluster_name>``;
both default levels mode 0700)::

    state.json          the nodes: tags and what the provider needs (0600, replaced atomically)
    state.lock          serializes read-modify-write of state.json across processes (0600)
    known_hosts         the SSH host keys of the cluster's nodes (0600; SSH providers)
    nodes/<node_id>/    the node's logs (0700, logs 0600)

Every directory and file here is made, opened and read through rayfield-core's
:mod:`rayfield.util.private_files`: this user's alone, every directory above owned by
this user or root (one others may write only with the sticky bit, as ``/tmp``), files
opened with ``O_NOFOLLOW`` and checked on the open descriptor. The checks run again on
every read (the monitor re-reads ``state.json`` at each step), so a directory that
another user renamed away and replaced is refused, never read. A refusal raises
:class:`rayfield.exceptions.UnsafeFileError`, whose message names the path and the fix.
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
from typing import IO, Any

from rayfield.autoscaler.provider_base import NodeProvider, ProviderError
from rayfield.util import private_files
from rayfield.util.private_files import UnsafeFileError

__all__ = [
    "StatefulProvider",
    "UnsafeFileError",
    "cluster_root",
    "default_cluster_dir",
    "open_log",
    "private_dir",
    "read_json",
]

#: What a refused cluster directory's message tells the user to do.
CLUSTER_DIR_FIX = (
    "remove it if you did not make it (another user may have, to control your cluster), "
    "or set provider.cluster_dir to a directory only you can write"
)


def default_cluster_dir(cluster_name: str) -> Path:
    """``<tmp>/rayfield-autoscaler-<uid>/<cluster_name>``."""
    return Path(tempfile.gettempdir()) / f"rayfield-autoscaler-{os.getuid()}" / cluster_name


def private_dir(path: Path, what: str = "the directory") -> Path:
    """``path``, created 0700 (missing parents too) or checked and set to 0700.

    Raises:
        UnsafeFileError: it or a directory above is not this user's alone (another user
            owns it or may write it, or may rename it away); the message names it.
        NotADirectoryError: it exists and is not a directory.
    """
    return private_files.ensure_private_dir(path, what=what, fix=CLUSTER_DIR_FIX)


def cluster_root(provider_config: dict[str, Any], cluster_name: str) -> Path:
    """The cluster directory, created or checked: ``provider.cluster_dir`` (``~``
    expanded), or :func:`default_cluster_dir`, whose parent
    ``rayfield-autoscaler-<uid>`` is made and checked as a private directory too.

    Raises:
        UnsafeFileError: the directory, or one above it, is not this user's alone.
    """
    given = provider_config.get("cluster_dir")
    if given:
        return private_dir(Path(given).expanduser(), "the cluster directory")
    path = default_cluster_dir(cluster_name)
    private_dir(path.parent, "the autoscaler's directory")
    return private_dir(path, "the cluster directory")


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in the private file ``path``; None when it is missing, not JSON or
    not an object.

    Raises:
        UnsafeFileError: it (or a directory above) fails the checks of
            :func:`rayfield.util.private_files.read_json`: another user could have
            written it.
    """
    try:
        data = private_files.read_json(path)
    except UnsafeFileError:
        raise
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def open_log(path: Path) -> IO[bytes]:
    """``path`` opened to append bytes, unbuffered (commands run with it as their
    stdout write to it too), mode 0600, through the checks of
    :func:`rayfield.util.private_files.open_private`; its directory is made private
    first.

    Raises:
        UnsafeFileError: the file or a directory above is not this user's alone.
    """
    private_dir(path.parent)
    with private_files.open_private(path, "ab") as checked:
        return os.fdopen(os.dup(checked.fileno()), "ab", buffering=0)


class StatefulProvider(NodeProvider):
    """A provider whose nodes are records (``tags`` and provider fields) in the cluster
    directory's ``state.json``; it implements the tag methods of the interface.

    Args:
        provider_config: the provider section; ``cluster_dir`` overrides the default.
        cluster_name: names the default cluster directory.

    Every read and write of the records goes through :mod:`rayfield.util.private_files`
    (see the module docstring).

    Raises:
        UnsafeFileError: the cluster directory (or one above it) is not this user's
            alone; so does any later method whose read of the records finds it so.
    """

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self.root = cluster_root(provider_config, cluster_name)
        self._state = self.root / "state.json"
        self._lock = self.root / "state.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The node records, locked; changes made in the block are written back."""
        with private_files.open_private(self._lock, "ab") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            nodes = (read_json(self._state) or {}).get("nodes", {})
            before = json.dumps(nodes, sort_keys=True)
            yield nodes
            if json.dumps(nodes, sort_keys=True) != before:
                self._write({"nodes": nodes})

    def _write(self, state: dict[str, Any]) -> None:
        with private_files.atomic_write(self._state, binary=False) as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())

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
        """``nodes/<node_id>`` under the cluster directory (created 0700, or checked).

        Raises:
            UnsafeFileError: it or a directory above is not this user's alone.
        """
        return private_dir(self.root / "nodes" / node_id)

    @property
    def known_hosts(self) -> Path:
        """The file the SSH host keys of the cluster's nodes are kept in (made 0600 by
        :class:`~rayfield.autoscaler.command_runner.SSHCommandRunner` at its first use)."""
        return self.root / "known_hosts"

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
