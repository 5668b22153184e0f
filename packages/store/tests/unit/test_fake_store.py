"""The store conformance suite run against the pure-Python fake, plus the fake's own API."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import pytest

from rayfield.store.errors import InvalidRequestError
from rayfield.store.testing import FakeObjectStore, FakeStoreClient, ObjectStoreConformance


class TestFakeObjectStore(ObjectStoreConformance):
    @contextlib.contextmanager
    def make_store(self, capacity_bytes: int) -> Iterator[Callable[[], FakeStoreClient]]:
        yield FakeObjectStore(capacity_bytes).connect


def test_store_side_views_match_clients() -> None:
    store = FakeObjectStore(1 << 20)
    with store.connect() as client:
        oid = os.urandom(20)
        client.put(oid, b"abc")
        assert store.stats() == client.stats()
        assert store.list_objects() == client.list_objects()
        assert client.arena_size == 1 << 20 and client.node_id == store.node_id


def test_bad_arguments() -> None:
    with pytest.raises(InvalidRequestError):
        FakeObjectStore(0)
    with pytest.raises(InvalidRequestError):
        FakeObjectStore().connect(kind="robot")
    with FakeObjectStore().connect() as client:
        with pytest.raises(InvalidRequestError):
            client.create(os.urandom(20), -1)
        assert client.next_notification(timeout_s=0) is None  # not subscribed


def test_delete_of_unsealed_object_happens_at_seal() -> None:
    with FakeObjectStore().connect() as client:
        oid = os.urandom(20)
        client.create(oid, 5)
        assert client.delete([oid]) == [False]
        client.seal(oid)
        assert not client.contains(oid) and client.list_objects() == []


def test_buffer_compares_by_identity() -> None:
    with FakeObjectStore().connect() as client:
        oid = os.urandom(20)
        client.put(oid, b"abc")
        [buf] = client.get([oid], timeout_s=0)
        assert buf != b"abc" and buf != b"abc" and buf == buf
        assert bytes(buf) == b"abc" and "size=3" in repr(buf)
