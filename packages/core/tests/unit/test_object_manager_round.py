"""The fetch loop's round (``ObjectManager._round``) with fakes, no processes: an object
nothing on the node waits for any more is dropped instead of being looked up for good."""

from __future__ import annotations

from typing import Any

from rayfield._private.node_manager import fetch_state as fs
from rayfield._private.node_manager.object_manager import ObjectManager

OID = [bytes([n]) * 20 for n in range(4)]


class Gcs:
    def with_limits(self, *args: Any, **kw: Any) -> Gcs:
        return self


class Store:
    def __init__(self) -> None:
        self.waits: list[list[bytes]] = []

    def wait(self, ids: list[bytes], num_ready: int, timeout_s: float) -> list[bool]:
        self.waits.append(list(ids))
        return [oid == OID[0] for oid in ids]  # OID[0]: made here already


def manager(waited: set[bytes] | None) -> tuple[ObjectManager, list[list[bytes]]]:
    asked: list[list[bytes]] = []

    def is_waited(ids: list[bytes]) -> list[bool]:
        asked.append(list(ids))
        return [waited is None or oid in waited for oid in ids]

    om = ObjectManager(
        b"n" * 28,
        "me:1",
        Store(),  # type: ignore[arg-type]
        Gcs(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        on_arrival=lambda ids: None,
        fail=lambda ids, tag, message: None,
        waited=None if waited is None else is_waited,
    )
    return om, asked


def test_objects_nothing_waits_for_are_dropped_not_looked_up() -> None:
    om, asked = manager(waited={OID[2]})
    looked_up: list[fs.Action] = []
    om._act = looked_up.extend  # type: ignore[method-assign]
    for oid in OID[:3]:
        om.state.want(oid, now=0.0)
    om._round()
    assert om.client.waits == [OID[:3]]  # one round trip asks the store about them all
    assert asked == [[OID[1], OID[2]]]  # the one here is not asked about
    assert set(om.state.wanted) == {OID[2]}  # made here; freed before the loop looked
    assert looked_up == [fs.LookUp((OID[2],))]


def test_without_the_query_every_absent_object_is_looked_up() -> None:
    om, _ = manager(waited=None)
    looked_up: list[fs.Action] = []
    om._act = looked_up.extend  # type: ignore[method-assign]
    for oid in OID[1:3]:
        om.state.want(oid, now=0.0)
    om._round()
    assert looked_up == [fs.LookUp((OID[1], OID[2]))]


class Data:
    """A DataClient stand-in: answers ``pull`` with ``result``, or raises it."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.calls: list[tuple[bytes, tuple[str, ...]]] = []

    def pull(self, store: Any, oid: bytes, sources: tuple[str, ...], wait_ms: int) -> Any:
        self.calls.append((oid, tuple(sources)))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def with_data(data: Data) -> tuple[ObjectManager, list[str], list[tuple[bytes, str]]]:
    om, _ = manager(waited=None)
    om.data = data  # type: ignore[assignment]
    grpc_pulls: list[str] = []
    arrived: list[tuple[bytes, str]] = []
    om.pull = lambda oid, address, wait_ms=0: grpc_pulls.append(address) or False  # type: ignore[method-assign]
    om._arrived = lambda oid, address, release: arrived.append((oid, address))  # type: ignore[method-assign]
    return om, grpc_pulls, arrived


def test_a_pull_on_the_data_channel_asks_every_holder_at_once_and_records_the_copy() -> None:
    om, grpc_pulls, arrived = with_data(Data((True, "b:1", 1000)))
    assert om.pull_any(OID[1], ("a:1", "b:1")) is True
    assert om.data.calls == [(OID[1], ("a:1", "b:1"))]  # type: ignore[union-attr]
    assert grpc_pulls == [] and arrived == [(OID[1], "b:1")]
    assert om.bytes_received == 1000


def test_no_data_channel_falls_back_to_grpc_one_holder_after_the_other() -> None:
    from rayfield._private.node_manager.data_pull import ChannelUnavailable

    om, grpc_pulls, arrived = with_data(Data(ChannelUnavailable("a:1 has no data channel")))
    assert om.pull_any(OID[1], ("a:1", "b:1")) is False
    assert grpc_pulls == ["a:1", "b:1"] and arrived == []
    om2, grpc2, _ = with_data(Data((False, "", 0)))  # reached, and nobody had it
    assert om2.pull_any(OID[1], ("a:1",)) is False and grpc2 == []
    om3, _, arrived3 = with_data(Data((None, "a:1", 5)))  # here already: not counted
    assert om3.pull_any(OID[1], ("a:1",)) is True and arrived3 == [] and om3.bytes_received == 0
