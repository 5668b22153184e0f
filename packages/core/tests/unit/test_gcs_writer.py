"""The node's queued GCS writes (``node_manager/gcs_writer.py``) against a fake GCS."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rayfield._private.node_manager.gcs_writer import MAX_LOCATIONS_A_CALL, GcsWriter
from rayfield._private.protocol.errors import GcsNotFoundError, GcsUnavailableError
from rayfield.testing import wait_for


class FakeGcs:
    """A GCS client that is unreachable while ``down`` is set and records what it took."""

    timeout_s = 1.0

    def __init__(self) -> None:
        self.down = threading.Event()
        self.unknown_nodes: set[bytes] = set()  # not registered as alive
        self.attempts = 0
        self.taken: list[Any] = []
        self.limits: tuple[float, float] | None = None

    def with_limits(self, timeout_s: float, retry_deadline_s: float) -> FakeGcs:
        self.limits = (timeout_s, retry_deadline_s)
        return self

    def take(self, what: Any) -> None:
        self.attempts += 1
        if self.down.is_set():
            raise GcsUnavailableError("GCS unreachable (test)")
        if what == "refused":
            raise GcsNotFoundError("no such record (test)")
        self.taken.append(what)

    def add_object_locations(self, node_id: bytes, object_ids: list[bytes]) -> None:
        if node_id in self.unknown_nodes:
            self.attempts += 1
            raise GcsNotFoundError(f"node {node_id.hex()} is not registered as alive (test)")
        self.take(("locations", node_id, tuple(object_ids)))

    def remove_object_locations(self, node_id: bytes, object_ids: list[bytes]) -> None:
        self.take(("removed", node_id, tuple(object_ids)))


ME = b"n1"  # the writer's node


@pytest.fixture
def gcs_and_writer() -> Iterator[tuple[FakeGcs, GcsWriter]]:
    gcs = FakeGcs()
    writer = GcsWriter(gcs, ME)  # type: ignore[arg-type]
    writer.start()
    yield gcs, writer
    gcs.down.clear()
    writer.stop(timeout_s=5)


def test_each_try_is_one_call_without_the_clients_retries(
    gcs_and_writer: tuple[FakeGcs, GcsWriter],
) -> None:
    gcs, _ = gcs_and_writer
    assert gcs.limits == (FakeGcs.timeout_s, 0.0)


def test_writes_wait_for_a_gcs_that_is_down_in_order_and_none_is_dropped(
    gcs_and_writer: tuple[FakeGcs, GcsWriter],
) -> None:
    gcs, writer = gcs_and_writer
    gcs.down.set()
    writer.write("first", lambda g: g.take("first"))
    writer.add_locations(ME, [b"a"])
    writer.write("second", lambda g: g.take("second"))
    writer.add_locations(ME, [b"b"])
    wait_for(lambda: gcs.attempts >= 3, 10, "the first write tried again while the GCS is down")
    assert gcs.taken == [] and writer.pending() == 3
    gcs.down.clear()
    assert writer.flush(timeout_s=10)
    # one call for both locations of n1, after the writes queued before them
    assert gcs.taken == ["first", "second", ("locations", ME, (b"a", b"b"))]


def test_locations_go_in_bounded_calls_and_wait_for_this_node_to_be_registered(
    gcs_and_writer: tuple[FakeGcs, GcsWriter],
) -> None:
    gcs, writer = gcs_and_writer
    gcs.unknown_nodes = {ME, b"gone"}  # e.g. a GCS restarted on a fresh database
    ids = [i.to_bytes(20, "big") for i in range(MAX_LOCATIONS_A_CALL + 1)]
    writer.add_locations(b"gone", ids[:1])  # a dead peer's: dropped
    writer.add_locations(ME, ids)
    wait_for(lambda: gcs.attempts >= 3, 10, "this node's locations tried again")
    assert gcs.taken == [] and writer.pending() >= 1
    gcs.unknown_nodes = {b"gone"}  # this node registered again
    assert writer.flush(timeout_s=10)
    assert gcs.taken == [
        ("locations", ME, tuple(ids[:MAX_LOCATIONS_A_CALL])),
        ("locations", ME, tuple(ids[MAX_LOCATIONS_A_CALL:])),
    ]


def test_removals_cancel_queued_adds_and_the_directory_ends_as_the_last_call_said(
    gcs_and_writer: tuple[FakeGcs, GcsWriter],
) -> None:
    gcs, writer = gcs_and_writer
    gcs.down.set()
    writer.write("first", lambda g: g.take("first"))  # holds the queue while it is down
    wait_for(lambda: gcs.attempts >= 1, 10, "a first try")
    writer.add_locations(ME, [b"a", b"b", b"c"])
    writer.add_locations(b"n2", [b"a", b"d"])
    writer.remove_locations(ME, [b"b"])  # this copy went before it was recorded
    writer.remove_locations(ME, [b"e"])
    writer.add_locations(ME, [b"e"])  # pulled again: the queued removal is dropped
    writer.remove_locations(b"", [b"a"])  # freed: every node's copy is forgotten
    gcs.down.clear()
    assert writer.flush(timeout_s=10)
    assert gcs.taken == [
        "first",
        ("locations", ME, (b"c", b"e")),
        ("locations", b"n2", (b"d",)),
        ("removed", ME, (b"b",)),
        ("removed", b"", (b"a",)),
    ]
    assert writer.pending() == 0


def test_a_refused_write_is_logged_and_the_next_ones_go(
    gcs_and_writer: tuple[FakeGcs, GcsWriter], caplog: pytest.LogCaptureFixture
) -> None:
    gcs, writer = gcs_and_writer
    with caplog.at_level(logging.WARNING, logger="rayfield"):
        writer.write("record the refused one", lambda g: g.take("refused"))
        writer.write("next", lambda g: g.take("next"))
        assert writer.flush(timeout_s=10)
    assert gcs.taken == ["next"]
    assert "could not record the refused one in the GCS" in caplog.text


def test_stop_while_the_gcs_is_down_gives_up_on_what_is_queued(
    gcs_and_writer: tuple[FakeGcs, GcsWriter], caplog: pytest.LogCaptureFixture
) -> None:
    gcs, writer = gcs_and_writer
    gcs.down.set()
    writer.write("never taken", lambda g: g.take("never taken"))
    wait_for(lambda: gcs.attempts >= 1, 10, "a first try")
    # the GCS stays down for good: a stop that waited for it would never return
    with caplog.at_level(logging.WARNING, logger="rayfield"):
        stopper = threading.Thread(target=writer.stop, kwargs={"timeout_s": 0.3})
        stopper.start()
        wait_for(lambda: not stopper.is_alive(), 30, "stop to return with the GCS down")
    assert "1 GCS write(s) not sent" in caplog.text
    assert gcs.taken == []
