"""The arena warmer: pages populated ahead of allocation after a large create, within the
arena, never changing an object's bytes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rayfield.store import InvalidRequestError, StoreClient
from rayfield.store.testing import local_node, wait_for

MiB = 1 << 20


def _put(client: StoreClient, data: bytes) -> bytes:
    oid = os.urandom(20)
    view = client.create(oid, len(data), b"")
    view[:] = data
    view.release()
    client.seal(oid)
    return oid


def test_a_large_create_warms_the_pages_after_it(tmp_path: Path) -> None:
    with (
        local_node(tmp_path, 64 * MiB, prefault=False, warm_ahead_bytes=8 * MiB) as node,
        StoreClient(node.socket_path) as client,
    ):
        assert node.warmed_bytes == 0
        _put(client, b"x" * 1000)  # small objects trigger nothing...
        _put(client, b"y" * (2 * MiB))  # ...a large one warms up to its end + 8 MiB
        wait_for(lambda: node.warmed_bytes >= 2 * MiB + 8 * MiB, message="the warmer caught up")
        first = node.warmed_bytes
        _put(client, b"z" * (4 * MiB))
        wait_for(lambda: node.warmed_bytes >= first + 4 * MiB, message="the warmer moved on")


def test_the_warmer_stays_within_the_arena(tmp_path: Path) -> None:
    with (
        local_node(tmp_path, 16 * MiB, prefault=False, warm_ahead_bytes=1 << 40) as node,
        StoreClient(node.socket_path) as client,
    ):
        _put(client, b"a" * (2 * MiB))
        capacity = client.stats()["capacity_bytes"]
        wait_for(lambda: node.warmed_bytes >= capacity, message="the whole arena warmed")
        assert node.warmed_bytes == capacity


def test_warming_never_changes_the_bytes_of_objects(tmp_path: Path) -> None:
    """Objects written while the warmer populates the same pages keep their contents."""
    with (
        local_node(tmp_path, 64 * MiB, prefault=False, warm_ahead_bytes=48 * MiB) as node,
        StoreClient(node.socket_path) as client,
    ):
        objects = {}
        for i in range(6):
            data = hashlib.sha256(b"%d" % i).digest() * (MiB // 32) * 3  # 3 MiB each
            objects[_put(client, data)] = hashlib.sha256(data).hexdigest()
        for oid, digest in objects.items():
            [buf] = client.get([oid], timeout_s=5)
            assert buf is not None and hashlib.sha256(buf).hexdigest() == digest
            buf.release()


def test_a_negative_warm_ahead_is_refused(tmp_path: Path) -> None:
    from rayfield.store import NodeServer

    with pytest.raises(InvalidRequestError, match="warm_ahead_bytes"):
        NodeServer(str(tmp_path / "node.sock"), MiB, warm_ahead_bytes=-1)
