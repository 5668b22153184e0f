"""The ``local`` provider: the reference's on-premise provider, a fixed list of machines
(``provider.head_ip`` and ``provider.worker_ips``) reached over SSH.

Creating a node takes a free address from the list (the head's for the head, the first
worker address not in use for a worker) and records it in the cluster directory's
``state.json`` (see :mod:`rayfield.autoscaler.cluster_state`); nothing runs on the
machine until the launcher's or the autoscaler's
:class:`~rayfield.autoscaler.node_setup.NodeSetup` sets it up over SSH (file mounts,
setup commands, ``rayfield start``) and records what the node reported: its rayfield node
id and, for the head, the GCS address and the cluster token (``state.json`` is 0600 in
a 0700 directory). Terminating a node frees its address; stopping rayfield on it is the
``stop_ray_commands`` that ``NodeSetup.stop`` runs first.

Sources:
    Ray 0.7 ``autoscaler/local/node_provider.py`` (spec 5.2).
"""

from __future__ import annotations

import secrets
from typing import Any

from rayfield.autoscaler.cluster_state import StatefulProvider
from rayfield.autoscaler.provider_base import KIND_HEAD, TAG_NODE_KIND, ProviderError

__all__ = ["LocalNodeProvider"]


class LocalNodeProvider(StatefulProvider):
    """Nodes on a fixed list of machines (see the module docstring).

    Args:
        provider_config: ``type: local``, ``head_ip``, ``worker_ips``, optionally
            ``cluster_dir``.
        cluster_name: names the cluster directory.

    Raises:
        ProviderError: ``head_ip`` is missing, or the cluster directory is not this
            user's alone.
    """

    #: Nodes run nothing until a NodeSetup sets them up over SSH.
    needs_setup = True

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self.head_ip = provider_config.get("head_ip")
        if not self.head_ip:
            raise ProviderError("provider type 'local' needs provider.head_ip (the head's address)")
        self.worker_ips = list(provider_config.get("worker_ips", []))

    # ---- NodeProvider -----------------------------------------------------------------

    def is_running(self, node_id: str) -> bool:
        return not self.is_terminated(node_id)

    def external_ip(self, node_id: str) -> str | None:
        rec = self._records().get(node_id)
        return str(rec["ip"]) if rec else None

    def internal_ip(self, node_id: str) -> str | None:
        return self.external_ip(node_id)

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        head = tags.get(TAG_NODE_KIND) == KIND_HEAD
        with self._locked() as nodes:
            used = {rec["ip"] for rec in nodes.values()}
            if head:
                if any(rec.get("head") for rec in nodes.values()) or count != 1:
                    raise ProviderError(
                        f"cluster {self.cluster_name!r} has one head ({self.head_ip}) and it "
                        "is in use: terminate it first"
                    )
                free = [self.head_ip]
            else:
                free = [ip for ip in self.worker_ips if ip not in used]
                if len(free) < count:
                    raise ProviderError(
                        f"{count} worker(s) asked for but {len(free)} of provider.worker_ips "
                        f"({len(self.worker_ips)}) are free: list more machines or lower "
                        "max_workers"
                    )
            for ip in free[:count]:
                node_id = f"{'head' if head else 'worker'}-{ip}-{secrets.token_hex(2)}"
                nodes[node_id] = {"tags": dict(tags), "ip": ip, "head": head}

    def terminate_node(self, node_id: str) -> None:
        with self._locked() as nodes:
            nodes.pop(node_id, None)

    def cluster_node_id(self, node_id: str) -> str | None:
        rec = self._records().get(node_id)
        value = rec.get("cluster_node_id") if rec else None
        return str(value) if value else None

    # ---- what setup records, and what the launcher reads ---------------------------------

    def record_started(self, node_id: str, info: dict[str, Any]) -> None:
        """Keep what the started node reported: ``cluster_node_id`` and, for the head,
        ``gcs_address`` and ``token`` (and what the launcher notes about the head).

        Raises:
            ProviderError: no such node.
        """
        with self._locked() as nodes:
            if node_id not in nodes:
                raise ProviderError(f"cluster {self.cluster_name!r} has no node {node_id!r}")
            nodes[node_id].update(info)

    def token(self, node_id: str) -> str:
        rec = self._record(node_id)
        if not rec.get("token"):
            raise ProviderError(f"{node_id} is not a started head of {self.cluster_name!r}")
        return str(rec["token"])
