"""An ``external`` provider for the launcher's end-to-end test: it "launches" a node by
taking a free host from a fixed pool (``provider.extra_config.hosts``, the sshd network
namespaces of tests/integration/netns.py) and terminates it by giving the host back. Its node
records live in ``provider.extra_config.pool_file`` (JSON, under a lock), so the
launcher's process and the monitor process see the same nodes, as they would a cloud's.
Nothing runs on a taken host until the launcher sets it up over SSH."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rayfield.autoscaler.node_provider import NodeProvider, ProviderError


class PoolProvider(NodeProvider):
    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        extra = provider_config.get("extra_config", {})
        self.hosts = list(extra["hosts"])
        self.pool_file = Path(extra["pool_file"])

    @contextlib.contextmanager
    def _nodes(self) -> Iterator[dict[str, dict[str, Any]]]:
        fd = os.open(f"{self.pool_file}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                nodes = json.loads(self.pool_file.read_text())
            except FileNotFoundError:
                nodes = {}
            yield nodes
            self.pool_file.write_text(json.dumps(nodes))
        finally:
            os.close(fd)

    def _get(self, node_id: str) -> dict[str, Any] | None:
        with self._nodes() as nodes:
            return nodes.get(node_id)

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        with self._nodes() as nodes:
            return sorted(
                k
                for k, rec in nodes.items()
                if all(rec["tags"].get(t) == v for t, v in tag_filters.items())
            )

    def is_running(self, node_id: str) -> bool:
        return self._get(node_id) is not None

    def is_terminated(self, node_id: str) -> bool:
        return self._get(node_id) is None

    def node_tags(self, node_id: str) -> dict[str, str]:
        rec = self._get(node_id)
        if rec is None:
            raise ProviderError(f"no node {node_id}")
        return dict(rec["tags"])

    def external_ip(self, node_id: str) -> str | None:
        rec = self._get(node_id)
        return rec["host"] if rec else None

    def internal_ip(self, node_id: str) -> str | None:
        return self.external_ip(node_id)

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        with self._nodes() as nodes:
            free = [h for h in self.hosts if h not in {r["host"] for r in nodes.values()}]
            if len(free) < count:
                raise ProviderError(f"{count} node(s) asked for, {len(free)} host(s) free")
            for host in free[:count]:
                nodes[f"pool-{secrets.token_hex(3)}"] = {"host": host, "tags": dict(tags)}

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        with self._nodes() as nodes:
            if node_id not in nodes:
                raise ProviderError(f"no node {node_id}")
            nodes[node_id]["tags"].update(tags)

    def terminate_node(self, node_id: str) -> None:
        with self._nodes() as nodes:
            nodes.pop(node_id, None)
