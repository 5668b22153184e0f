"""GCS logic without processes: the flatbuffers codec and the tables (fake clock)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from rayfield._private.gcs.tables import GcsTables
from rayfield._private.protocol import codec
from rayfield._private.protocol.errors import GcsInvalidRequestError
from rayfield._private.protocol.types import ActorInfo, ActorState, NodeInfo, ResourceDemand


def test_codec_round_trip_and_garbage() -> None:
    node = NodeInfo(
        b"n", address="h:1", resources_total={"CPU": 0.5}, demand=[ResourceDemand({"GPU": 1})]
    )
    buf = codec.encode("GcsRegisterNodeRequest", {"node": node})
    assert codec.decode("GcsRegisterNodeRequest", buf)["node"] == node
    ids = [bytes([i]) * 20 for i in range(3)]
    req = codec.decode(
        "GcsObjectLocationsRequest",
        codec.encode("GcsObjectLocationsRequest", {"node_id": b"n", "object_ids": ids}),
    )
    assert req == {"node_id": b"n", "object_ids": ids}
    rng = random.Random(0)
    for _ in range(2000):  # every corruption decodes or raises GcsInvalidRequestError
        bad = bytearray(buf)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            codec.decode("GcsRegisterNodeRequest", bytes(bad))
        except GcsInvalidRequestError:
            pass
    for size in (0, 3, 11, 64):
        with pytest.raises(GcsInvalidRequestError):
            codec.decode("GcsRegisterNodeRequest", b"\xff" * size)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_tables_liveness_and_recovery(tmp_path: Path) -> None:
    published: list[tuple[str, bytes, Any]] = []
    clock = Clock()
    db = str(tmp_path / "gcs.sqlite")
    t = GcsTables(db, lambda *m: published.append(m), heartbeat_timeout_s=3.0, clock=clock)
    t.register_node(NodeInfo(b"a", resources_total={"CPU": 2}))
    t.register_node(NodeInfo(b"b"))
    t.register_actor(ActorInfo(b"x", name="x", node_id=b"b"))
    t.add_object_locations(b"b", [b"o" * 20])
    assert os.stat(db).st_mode & 0o077 == 0
    clock.now += 2.0
    assert t.heartbeat(b"a", {"CPU": 1}, []) is False
    clock.now += 2.0
    assert t.check_heartbeats() == [b"b"]
    assert [m[0] for m in published[-2:]] == ["ACTOR", "NODE_DEAD"]
    assert t.get_object_locations([b"o" * 20]) == {b"o" * 20: []}
    assert t.get_actor(b"x", "", "").state == ActorState.DEAD  # type: ignore[union-attr]
    t.close()
    clock.now += 100.0  # reopened: known alive nodes get one timeout to reappear
    t2 = GcsTables(db, lambda *m: None, heartbeat_timeout_s=3.0, clock=clock)
    assert {n.node_id: n.alive for n in t2.nodes.values()} == {b"a": True, b"b": False}
    assert t2.heartbeat(b"b", {}, []) is True
    clock.now += 3.5
    assert t2.check_heartbeats() == [b"a"]
    t2.close()


def test_heartbeat_records_the_idle_time_the_node_reports(tmp_path: Path) -> None:
    t = GcsTables(str(tmp_path / "gcs.sqlite"), lambda *m: None, clock=Clock())
    t.register_node(NodeInfo(b"a", resources_total={"CPU": 2}))
    assert t.nodes[b"a"].idle_duration_s == 0.0
    assert t.heartbeat(b"a", {"CPU": 2}, [], 7.5) is False
    assert t.nodes[b"a"].idle_duration_s == 7.5
    t.heartbeat(b"a", {"CPU": 1}, [])  # a heartbeat without the figure: busy
    assert t.nodes[b"a"].idle_duration_s == 0.0
    t.heartbeat(b"a", {"CPU": 2}, [], 3.0)
    t.register_node(NodeInfo(b"a", resources_total={"CPU": 2}))  # registered again
    assert t.nodes[b"a"].idle_duration_s == 0.0
    t.close()
