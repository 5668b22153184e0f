"""Cluster logic without processes: load-based placement, scheduling strategies and the
push/forward messages."""

from __future__ import annotations

import pytest

from rayfield._private.common.scheduling import (
    NodeAffinitySchedulingStrategy,
    Strategy,
    check,
    decode,
    encode,
)
from rayfield._private.node_manager.placement import (
    NodeSlot,
    PeerLoad,
    Placement,
    place_strategy,
    plan_moves,
)
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


# ---- scheduling strategies ---------------------------------------------------------------

A, B, C = (bytes([i]) * 20 for i in (1, 2, 3))


def slot(node_id: bytes, total: float, free: float, address: str = "") -> NodeSlot:
    return NodeSlot(node_id, {"CPU": total}, {"CPU": free}, address)


def spread(nodes: list[NodeSlot], count: int, demand: dict[str, float]) -> list[bytes]:
    """Where ``count`` SPREAD tasks go from the first node, one after another."""
    here, peers = nodes[0], nodes[1:]
    last, out = b"", []
    for _ in range(count):
        placed = place_strategy(decode("SPREAD"), demand, here, peers, last)
        assert placed.node is not None
        assert placed.action == ("here" if placed.node is here else "forward")
        last = placed.node.node_id
        out.append(last)
    return out


def test_spread_goes_round_robin_over_nodes_in_id_order() -> None:
    nodes = [slot(B, 1, 1), slot(A, 1, 1, "a:1"), slot(C, 1, 1, "c:1")]
    assert spread(nodes, 5, {}) == [A, B, C, A, B]


def test_spread_prefers_nodes_with_free_resources_and_skips_too_small_ones() -> None:
    nodes = [slot(A, 4, 0), slot(B, 4, 2, "b:1"), slot(C, 0.5, 0.5, "c:1")]
    assert spread(nodes, 3, CPU1) == [B, B, B]  # A is busy, C can never fit 1 CPU
    busy = [slot(A, 4, 0), slot(B, 4, 0, "b:1"), slot(C, 0.5, 0.5, "c:1")]
    assert spread(busy, 3, CPU1) == [A, B, A]  # none free: all that fit, in turn


def test_spread_that_no_node_fits_stays_here_for_the_infeasible_path() -> None:
    placed = place_strategy(decode("SPREAD"), {"GPU": 1.0}, slot(A, 1, 1), [slot(B, 1, 1, "b")])
    assert placed == Placement("here")


def test_hard_affinity_pins_to_its_node_or_fails_naming_it() -> None:
    here, peers = slot(A, 1, 0), [slot(B, 1, 0, "b:1")]
    to_b = place_strategy(
        decode(encode(NodeAffinitySchedulingStrategy(B.hex(), False))), CPU1, here, peers
    )
    assert to_b.action == "forward" and to_b.node == peers[0]  # busy, but it fits: it waits there
    to_a = place_strategy(decode(f"NODE:{A.hex()}:0"), CPU1, here, peers)
    assert to_a.action == "here"
    dead = place_strategy(decode(f"NODE:{C.hex()}:0"), CPU1, here, peers)
    assert dead.action == "fail" and C.hex() in dead.message and "dead or unknown" in dead.message
    small = place_strategy(decode(f"NODE:{B.hex()}:0"), {"CPU": 2.0}, here, peers)
    assert small.action == "fail" and "can never fit" in small.message


def test_soft_affinity_falls_back_to_default_placement() -> None:
    here, peers = slot(A, 1, 1), [slot(B, 1, 1, "b:1")]
    assert place_strategy(decode(f"NODE:{B.hex()}:1"), CPU1, here, peers).node == peers[0]
    assert place_strategy(decode(f"NODE:{C.hex()}:1"), CPU1, here, peers) == Placement("here")
    too_big = place_strategy(decode(f"NODE:{B.hex()}:1"), {"CPU": 3.0}, here, peers)
    assert too_big == Placement("here")


def test_strategy_options_are_checked_and_encoded() -> None:
    assert encode(check("SPREAD")) == "SPREAD"
    assert encode(check("DEFAULT")) == encode(check(None)) == ""
    node = NodeAffinitySchedulingStrategy(A.hex().upper(), soft=True)
    assert decode(encode(node)) == Strategy("NODE", A, True)
    with pytest.raises(ValueError, match="'DEFAULT', 'SPREAD'"):
        check("SPRED")
    with pytest.raises(TypeError, match="NodeAffinitySchedulingStrategy"):
        check(3)
    with pytest.raises(ValueError, match="40 hex digits"):
        NodeAffinitySchedulingStrategy("abc", soft=False)
    with pytest.raises(TypeError, match="soft"):
        NodeAffinitySchedulingStrategy(A.hex(), soft=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown scheduling strategy"):
        decode("NODE:zz:1")
