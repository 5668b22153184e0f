"""What a node does when its store removes an object (``node_manager/object_frees.py``),
against a fake GCS, writer and peers (no processes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rayfield._private.node_manager.membership import PeerView
from rayfield._private.node_manager.object_frees import ObjectFrees
from rayfield._private.protocol.errors import GcsUnavailableError
from rayfield._private.protocol.types import NodeInfo

ME, B, C = b"me" * 10, b"bb" * 10, b"cc" * 10
BIG = 8 << 20


def oid(i: int) -> bytes:
    return i.to_bytes(20, "big")


class FakeGcs:
    def __init__(self) -> None:
        self.rows: dict[bytes, list[bytes]] = {}
        self.down = False

    def with_limits(self, timeout_s: float, retry_deadline_s: float) -> FakeGcs:
        return self

    def get_object_locations(self, ids: list[bytes]) -> dict[bytes, list[bytes]]:
        if self.down:
            raise GcsUnavailableError("down (test)")
        return {i: self.rows.get(i, []) for i in ids}


class FakeWriter:
    def __init__(self) -> None:
        self.removed: list[tuple[bytes, list[bytes]]] = []

    def remove_locations(self, node_id: bytes, ids: Any) -> None:
        ids = list(ids)
        if ids:
            self.removed.append((node_id, ids))


class Setup:
    def __init__(self) -> None:
        self.gcs = FakeGcs()
        self.writer = FakeWriter()
        self.peers = PeerView(ME, "me:1")
        self.peers.update(
            [NodeInfo(ME, address="me:1"), NodeInfo(B, address="b:1"), NodeInfo(C, address="c:1")]
        )
        self.sent: list[tuple[str, list[bytes]]] = []
        self.frees = ObjectFrees(
            ME,
            "me:1",
            self.gcs,  # type: ignore[arg-type]
            self.writer,  # type: ignore[arg-type]
            self.peers,
            self.send,
        )
        self.frees.start()

    def send(self, address: str, ids: list[bytes]) -> None:
        if address == "dead:1":
            raise ConnectionError("unreachable (test)")
        self.sent.append((address, ids))


@pytest.fixture
def s() -> Iterator[Setup]:
    setup = Setup()
    yield setup
    setup.frees.stop()


def test_a_freed_large_object_is_freed_on_every_holder_and_forgotten(s: Setup) -> None:
    s.frees.copied([oid(1)], "c:1")  # pushed to c
    s.gcs.rows[oid(1)] = [B, ME]  # b pulled it (and this node is listed too)
    s.frees.removed(oid(1), evicted=False, size=BIG)
    assert s.frees.flush(10)
    assert sorted(s.sent) == [("b:1", [oid(1)]), ("c:1", [oid(1)])]  # never this node
    assert s.writer.removed == [(b"", [oid(1)])]


def test_with_the_gcs_down_the_known_holders_are_told_and_the_rows_still_go(s: Setup) -> None:
    s.gcs.down = True
    s.frees.copied([oid(2)], "b:1")
    s.frees.copied([oid(2)], "dead:1")  # a failed call is only logged
    s.frees.removed(oid(2), evicted=False, size=BIG)
    assert s.frees.flush(10)
    assert s.sent == [("b:1", [oid(2)])]
    assert s.writer.removed == [(b"", [oid(2)])]  # queued: the writer retries it
    assert s.frees.pending() == 0


def test_a_large_object_nobody_copied_costs_one_lookup_and_no_write(s: Setup) -> None:
    s.frees.removed(oid(3), evicted=False, size=BIG)
    assert s.frees.flush(10)
    assert s.sent == [] and s.writer.removed == []


def test_small_and_evicted_objects_only_touch_the_rows(s: Setup) -> None:
    s.frees.record([oid(4), oid(5), oid(6)])
    s.frees.copied([oid(4)], "b:1")
    s.frees.removed(oid(4), evicted=False, size=100)  # freed, small: its rows go
    s.frees.removed(oid(5), evicted=True, size=BIG)  # evicted: this node's row goes
    s.frees.removed(oid(7), evicted=False, size=100)  # never recorded: nothing
    assert s.frees.flush(10)
    assert s.sent == []
    assert s.writer.removed == [(b"", [oid(4)]), (ME, [oid(5)])]


def test_what_a_peer_freed_is_dropped_quietly(s: Setup) -> None:
    s.frees.record([oid(8)])
    s.frees.copied([oid(8)], "b:1")
    s.frees.freed_elsewhere([oid(8), oid(9)])
    assert s.writer.removed == [(ME, [oid(8)])]  # its own row, in case it is still queued
    s.frees.removed(oid(8), evicted=False, size=BIG)  # the delete that call caused
    assert s.frees.flush(10)
    assert s.sent == [] and s.writer.removed == [(ME, [oid(8)])]
    assert s.frees.freed_by_peers == 2
