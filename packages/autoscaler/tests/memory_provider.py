"""``MemoryProvider``: a node provider whose nodes are dict entries, for the tests that
drive the autoscaler, the updaters and the conformance suite without processes."""

from __future__ import annotations

from typing import Any

from rayfield.autoscaler.node_provider import NodeProvider, ProviderError


class MemoryProvider(NodeProvider):
    """Nodes as dict entries; a node joins the cluster when the test says so."""

    def __init__(self) -> None:
        super().__init__({"type": "memory"}, "t")
        self.nodes: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.fail = False

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        return sorted(
            k
            for k, n in self.nodes.items()
            if all(n["tags"].get(a) == b for a, b in tag_filters.items())
        )

    def is_running(self, node_id: str) -> bool:
        return node_id in self.nodes

    def is_terminated(self, node_id: str) -> bool:
        return node_id not in self.nodes

    def node_tags(self, node_id: str) -> dict[str, str]:
        return dict(self._node(node_id)["tags"])

    def _node(self, node_id: str) -> dict[str, Any]:
        if node_id not in self.nodes:
            raise ProviderError(f"no node {node_id}")
        return self.nodes[node_id]

    def external_ip(self, node_id: str) -> str | None:
        return "10.0.0.1"

    def internal_ip(self, node_id: str) -> str | None:
        return "10.0.0.1"

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        if self.fail:
            raise ProviderError("no capacity")
        for _ in range(count):
            node_id = f"n{len(self.created)}"
            self.created.append(node_id)
            self.nodes[node_id] = {"tags": dict(tags), "resources": node_config["resources"]}

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        self._node(node_id)["tags"].update(tags)

    def terminate_node(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)

    def cluster_node_id(self, node_id: str) -> str | None:
        return f"cluster-{node_id}"
