"""The launcher's state for a provider that keeps its nodes itself (``aws``, ``gcp``,
``kubernetes``, ``external``): what the launcher learned from the nodes it set up over
SSH, kept on the user's machine apart from the provider's node records.

:class:`SSHClusterProvider` wraps such a provider. Creating, listing, tagging and
terminating nodes go to the wrapped provider (the cloud keeps the node records and their
tags); what a node reported once started (its rayfield node id and, for the head, the GCS
address and the cluster token) goes to the per-cluster state directory
(``provider.cluster_dir``, default ``<tmp>/rayfield-autoscaler-<uid>/<cluster_name>``,
both levels mode 0700; every file kept and read through
:mod:`rayfield.util.private_files`, see :mod:`rayfield.autoscaler.cluster_state`)::

    launcher.json       node id -> what the node reported (0600, replaced atomically)
    state.lock          serializes read-modify-write of launcher.json across processes
    bootstrap.yaml      the prepared config (0600, commands.py); the monitor runs on the
                        head from a copy (rayfield.autoscaler.head_monitor), with a copy
                        of launcher.json that ``down`` and ``get-worker-ips`` pull back
    known_hosts         the nodes' SSH host keys (0600); a terminated node's addresses
                        are removed from it, since a new machine may get them next
    nodes/<node_id>/    the node's update log (0600)

The cluster token never goes into the provider's tags; the wrapped provider may keep it
for nodes that start later (``publish_token``: a Kubernetes Secret).
"""

from __future__ import annotations

from typing import Any

from rayfield.autoscaler import known_hosts
from rayfield.autoscaler.cluster_state import StatefulProvider
from rayfield.autoscaler.node_provider import KIND_HEAD, TAG_NODE_KIND, NodeProvider, ProviderError

__all__ = ["SSHClusterProvider"]


class SSHClusterProvider(StatefulProvider):
    """``inner``'s nodes, set up over SSH, with the launcher's state kept locally (see the
    module docstring).

    Args:
        inner: the provider that creates the nodes.

    Raises:
        UnsafeFileError: the state directory (or one above it) is not this user's alone.
    """

    #: The wrapped provider's nodes run nothing until NodeSetup sets them up over SSH.
    needs_setup = True

    def __init__(self, inner: NodeProvider) -> None:
        super().__init__(inner.provider_config, inner.cluster_name)
        self.inner = inner
        self._state = self.root / "launcher.json"

    # ---- NodeProvider: the wrapped provider's nodes ---------------------------------------

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        return self.inner.non_terminated_nodes(tag_filters)

    def is_running(self, node_id: str) -> bool:
        return self.inner.is_running(node_id)

    def is_terminated(self, node_id: str) -> bool:
        return self.inner.is_terminated(node_id)

    def node_tags(self, node_id: str) -> dict[str, str]:
        return self.inner.node_tags(node_id)

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        self.inner.set_node_tags(node_id, tags)

    def external_ip(self, node_id: str) -> str | None:
        return self.inner.external_ip(node_id)

    def internal_ip(self, node_id: str) -> str | None:
        return self.inner.internal_ip(node_id)

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        self.inner.create_node(node_config, tags, count)

    def terminate_node(self, node_id: str) -> None:
        """Terminate the node, drop its record and forget its host keys (its addresses
        may go to a new machine, whose key then is accepted as new)."""
        try:
            addresses = {self.inner.internal_ip(node_id), self.inner.external_ip(node_id)}
        except ProviderError:  # gone already
            addresses = set()
        self.inner.terminate_node(node_id)
        with self._locked() as nodes:
            nodes.pop(node_id, None)
        known_hosts.forget(self.known_hosts, [a for a in addresses if a])

    def cluster_node_id(self, node_id: str) -> str | None:
        value = self._records().get(node_id, {}).get("cluster_node_id")
        return str(value) if value else None

    def cleanup(self) -> None:
        self.inner.cleanup()

    @property
    def runs_commands(self) -> bool:  # type: ignore[override]
        """Whether the wrapped provider reaches its nodes itself (no SSH)."""
        return self.inner.runs_commands

    def command_runner(self, node_id: str) -> Any:
        return self.inner.command_runner(node_id)

    def publish_token(self, token: str) -> None:
        self.inner.publish_token(token)

    def remove_cluster(self) -> None:
        self.inner.remove_cluster()

    # ---- what setup records, and what the launcher reads ---------------------------------

    def head_id(self) -> str:
        heads = self.inner.non_terminated_nodes({TAG_NODE_KIND: KIND_HEAD})
        if not heads:
            raise ProviderError(
                f"cluster {self.cluster_name!r} has no head: workers join a head; run "
                "`rayfield-autoscaler up` first"
            )
        return heads[0]

    @property
    def head_ip(self) -> str | None:
        """The head's address inside the cluster; None when there is no head."""
        try:
            return self.inner.internal_ip(self.head_id())
        except ProviderError:
            return None

    def record_started(self, node_id: str, info: dict[str, Any]) -> None:
        """Keep what the started node reported: ``cluster_node_id`` and, for the head,
        ``gcs_address`` and ``token`` (and what the launcher notes about the head)."""
        with self._locked() as nodes:
            nodes.setdefault(node_id, {"tags": {}}).update(info)

    def token(self, node_id: str) -> str:
        rec = self._records().get(node_id, {})
        if not rec.get("token"):
            raise ProviderError(f"{node_id} is not a started head of {self.cluster_name!r}")
        return str(rec["token"])
