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
    def contains(self, object_id: bytes) -> bool:
        return object_id == OID[0]  # made here already


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
        on_arrival=lambda oid: None,
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
