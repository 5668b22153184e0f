"""A conformance test suite for :class:`~rayfield.autoscaler.node_provider.NodeProvider`
implementations, for the built-in providers and third-party ones alike.

Subclass it in a pytest module under a name starting with ``Test`` and implement
:meth:`NodeProviderConformance.make_provider` (and :attr:`node_config` when the
provider needs more than resources)::

    from rayfield.autoscaler.provider_conformance import NodeProviderConformance

    class TestMyProvider(NodeProviderConformance):
        def make_provider(self):
            return MyProvider({"type": "external", "module": "..."}, "conformance")

Each test creates what it needs (a head first, then a worker, as the launcher does)
and terminates every node it created, whether it passes or not. The suite needs pytest
only to run it; this module imports nothing from it.
"""

from __future__ import annotations

from typing import Any

from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    KIND_WORKER,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    NodeProvider,
    ProviderError,
)

__all__ = ["NodeProviderConformance"]


class NodeProviderConformance:
    """The behaviour every ``NodeProvider`` must have (see the module docstring)."""

    #: What :meth:`NodeProvider.create_node` gets for each node of the suite.
    node_config: dict[str, Any] = {"resources": {"CPU": 1}}

    def make_provider(self) -> NodeProvider:
        """A provider for a cluster of its own, with no node yet."""
        raise NotImplementedError("subclasses return the provider under test")

    # ---- fixtures ---------------------------------------------------------------------

    def setup_method(self) -> None:
        self.provider = self.make_provider()

    def teardown_method(self) -> None:
        try:
            for node_id in self.provider.non_terminated_nodes({}):
                self.provider.terminate_node(node_id)
        finally:
            self.provider.cleanup()

    def _create(self, kind: str, **tags: str) -> str:
        before = set(self.provider.non_terminated_nodes({}))
        self.provider.create_node(dict(self.node_config), {TAG_NODE_KIND: kind, **tags}, 1)
        new = set(self.provider.non_terminated_nodes({})) - before
        assert len(new) == 1, f"create_node(count=1) added {len(new)} nodes: {sorted(new)}"
        return new.pop()

    # ---- the tests ----------------------------------------------------------------------

    def test_a_new_cluster_has_no_node(self) -> None:
        assert self.provider.non_terminated_nodes({}) == []

    def test_unknown_nodes(self) -> None:
        assert self.provider.is_terminated("no-such-node")
        assert not self.provider.is_running("no-such-node")
        for call in (
            lambda: self.provider.node_tags("no-such-node"),
            lambda: self.provider.set_node_tags("no-such-node", {"a": "b"}),
        ):
            try:
                call()
            except ProviderError:
                continue
            raise AssertionError("an unknown node id must raise ProviderError")
        self.provider.terminate_node("no-such-node")  # gone already: not an error

    def test_lifecycle_tags_and_filters(self) -> None:
        head = self._create(KIND_HEAD, custom="1")
        worker = self._create(KIND_WORKER)
        p = self.provider
        assert sorted(p.non_terminated_nodes({})) == sorted([head, worker])
        assert p.non_terminated_nodes({TAG_NODE_KIND: KIND_HEAD}) == [head]
        assert p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER}) == [worker]
        assert p.non_terminated_nodes({TAG_NODE_KIND: KIND_HEAD, "custom": "2"}) == []
        assert p.node_tags(head) == {TAG_NODE_KIND: KIND_HEAD, "custom": "1"}
        for node_id in (head, worker):
            assert p.is_running(node_id) and not p.is_terminated(node_id)
            assert isinstance(p.internal_ip(node_id), str)
        p.set_node_tags(worker, {TAG_NODE_STATUS: "up-to-date"})
        p.set_node_tags(worker, {"custom": "x"})
        assert p.node_tags(worker) == {
            TAG_NODE_KIND: KIND_WORKER,
            TAG_NODE_STATUS: "up-to-date",
            "custom": "x",
        }
        assert p.non_terminated_nodes({"custom": "x"}) == [worker]
        p.terminate_nodes([worker])
        assert p.is_terminated(worker) and not p.is_running(worker)
        assert p.non_terminated_nodes({}) == [head]
        p.terminate_node(worker)  # twice: not an error
        p.terminate_node(head)
        assert p.non_terminated_nodes({}) == []
