"""The store conformance suite run against the native store: a real node and StoreClient."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from rayfield.store import StoreClient
from rayfield.store.testing import ObjectStoreConformance, local_node


class TestNativeObjectStore(ObjectStoreConformance):
    @contextlib.contextmanager
    def make_store(self, capacity_bytes: int) -> Iterator[Callable[[], StoreClient]]:
        with local_node(None, capacity_bytes) as node:
            yield lambda: StoreClient(node.socket_path)


def test_node_and_client_views_agree(node) -> None:
    with StoreClient(node.socket_path, kind="tool", name="views") as client:
        oid = os.urandom(20)
        client.put(oid, b"abc", metadata=b"m")
        assert client.node_id == node.node_id and client.arena_size >= node.capacity_bytes
        assert node.stats()["num_objects"] == client.stats()["num_objects"] == 1
        [seen_by_node], [seen_by_client] = node.list_objects(), client.list_objects()
        assert {k: seen_by_node[k] for k in seen_by_client} == seen_by_client
        # The node also knows who made it and why it is held.
        assert seen_by_node["owner_pid"] == os.getpid()
        assert seen_by_node["pin_count"] + seen_by_node["buffer_count"] == seen_by_node["ref_count"]
        assert seen_by_node["spilled"] is False


def test_buffer_outlives_its_client(node) -> None:
    """A buffer kept after its client (or node) is gone must not crash when released."""
    client = StoreClient(node.socket_path)
    oid = os.urandom(20)
    client.put(oid, b"x" * 100)
    [buf] = client.get([oid], timeout_s=1.0)
    client.close()
    buf.release()  # the connection is gone: nothing to tell the node
    assert client.closed
