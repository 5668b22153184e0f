"""Every provider here passes the NodeProvider conformance suite."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from memory_provider import MemoryProvider

from rayfield.autoscaler.local_process import LocalProcessProvider
from rayfield.autoscaler.node_provider import NodeProvider
from rayfield.autoscaler.provider_conformance import NodeProviderConformance


class TestMemoryProvider(NodeProviderConformance):
    """The in-memory provider of the loop tests (it checks the suite itself, fast)."""

    def make_provider(self) -> NodeProvider:
        return MemoryProvider()


@pytest.mark.timeout(300)
class TestLocalProcessProvider(NodeProviderConformance):
    node_config = {"resources": {"CPU": 1}, "object_store_memory": 64 << 20}

    def make_provider(self) -> NodeProvider:
        self._dir = tempfile.TemporaryDirectory(prefix="rf-conformance-")
        root = Path(self._dir.name) / "cluster"
        return LocalProcessProvider({"type": "local_process", "cluster_dir": str(root)}, "c")

    def teardown_method(self) -> None:
        try:
            super().teardown_method()
        finally:
            self._dir.cleanup()
