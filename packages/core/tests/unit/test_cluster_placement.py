"""Cluster logic without processes: load-based placement and the push/forward messages."""

from __future__ import annotations

import pytest

from rayfield._private.node_manager.placement import PeerLoad, plan_moves
from rayfield._private.protocol import messages


def tid(i: int) -> bytes:
    return i.to_bytes(20, "little")


CPU1 = {"CPU": 1.0}


def test_work_that_fits_here_stays() -> None:
    ready = [(tid(1), CPU1, False), (tid(2), CPU1, True)]
    peers = [PeerLoad("b:1", {"CPU": 4.0})]
    assert plan_moves(ready, {"CPU": 2.0}, peers) == []


def test_creations_move_first_and_peers_fill_up() -> None:
    ready = [(tid(1), CPU1, False), (tid(2), CPU1, False), (tid(3), CPU1, True)]
    peers = [PeerLoad("b:1", {"CPU": 2.0})]
    moves = plan_moves(ready, {}, peers)
    assert moves == [(tid(3), "b:1"), (tid(1), "b:1")]  # the actor first; then b is full
    assert peers[0].available["CPU"] == pytest.approx(0.0)


def test_local_free_resources_are_taken_in_order() -> None:
    ready = [(tid(1), CPU1, False), (tid(2), CPU1, False)]
    moves = plan_moves(ready, {"CPU": 1.0}, [PeerLoad("b:1", {"CPU": 1.0})])
    assert moves == [(tid(2), "b:1")]  # 1 starts here, 2 would wait: it moves


def test_forwarded_work_and_zero_demand_do_not_move() -> None:
    ready = [(tid(1), CPU1, True), (tid(2), {"CPU": 0.0}, True)]
    peers = [PeerLoad("b:1", {"CPU": 8.0})]
    assert plan_moves(ready, {}, peers, stay={tid(1)}) == []


def test_a_peer_must_fit_every_resource() -> None:
    demand = {"CPU": 1.0, "GPU": 1.0}
    peers = [PeerLoad("b:1", {"CPU": 4.0}), PeerLoad("c:1", {"CPU": 1.0, "GPU": 1.0})]
    assert plan_moves([(tid(1), demand, False)], {}, peers) == [(tid(1), "c:1")]


def test_push_message_round_trip() -> None:
    oid = tid(7)
    raw = messages.encode_push(oid, "127.0.0.1:5", 3, b"meta", b"abc")
    assert messages.decode_push(raw) == (oid, "127.0.0.1:5", 3, b"meta", memoryview(b"abc"))
    announced = messages.decode_push(messages.encode_push(oid, "h:1", 1 << 30))
    assert announced == (oid, "h:1", 1 << 30, b"", None)


def test_push_with_wrong_inline_size_is_malformed() -> None:
    raw = messages.encode_push(tid(7), "h:1", 10, b"", b"abc")
    with pytest.raises(messages.MalformedMessage, match="carries 3"):
        messages.decode_push(raw)
    with pytest.raises(messages.MalformedMessage):
        messages.decode_push(raw[:12])


def test_forward_carries_the_pushed_arguments() -> None:
    spec = {
        "task_id": tid(1),
        "payload": b"x",
        "resources": CPU1,
        "dependencies": [tid(2), tid(3)],
        "return_ids": [tid(4)],
    }
    [(origin, decoded, pushed), (_, _, none)], _ = messages.decode_forward_batch(
        messages.encode_forward_batch("a:1", [(spec, [tid(3)]), (spec, [])])
    )
    assert (origin, decoded["dependencies"], pushed) == ("a:1", [tid(2), tid(3)], [tid(3)])
    assert none == []
