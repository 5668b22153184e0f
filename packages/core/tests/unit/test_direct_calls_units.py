"""The parts of direct actor calls that need no process: the path plan of a handle and the
wire's frames."""

from __future__ import annotations

import socket

import pytest

from rayfield._private.driver.direct_plan import MAX_PROBE_GAP, DirectPlan
from rayfield._private.runtime import direct_wire as wire


def _never(_: bytes) -> bool:
    raise AssertionError("node_done asked with no node call to check")


def test_a_handle_looks_for_the_worker_once_after_its_first_node_calls() -> None:
    plan = DirectPlan(probe_after=3)
    probes = []
    for i in range(6):
        choice = plan.choose(True, _never if i == 0 else lambda _: False)
        assert not choice.direct
        plan.sent_node(b"r%d" % i)
        probes.append(choice.probe)
    assert probes == [False, False, True, False, False, False]  # one look at a time


def test_a_failed_look_is_tried_again_after_twice_as_many_node_calls() -> None:
    plan = DirectPlan(probe_after=2)
    at = []
    for _ in range(40):
        if plan.choose(True, lambda _: False).probe:
            at.append(plan.node_calls)
            plan.probed(False)
        plan.sent_node(b"r")
    assert at == [2, 6, 14, 30]
    plan.gap = MAX_PROBE_GAP
    plan.probed(False)
    assert plan.gap == MAX_PROBE_GAP  # capped


def test_calls_go_direct_only_once_the_node_finished_the_earlier_ones() -> None:
    plan = DirectPlan(probe_after=1)
    assert plan.choose(True, _never).probe
    plan.sent_node(b"last")
    plan.probed(True)
    done = {b"last": False}
    assert not plan.choose(True, lambda oid: done[oid]).direct  # still running there
    plan.sent_node(b"later")
    done[b"later"] = True
    assert plan.choose(True, lambda oid: done[oid]).direct
    plan.sent_direct()
    assert plan.choose(True, _never).direct  # direct from then on


def test_a_node_call_without_returns_keeps_calls_on_the_node() -> None:
    plan = DirectPlan(probe_after=1)
    plan.choose(True, _never)
    plan.probed(True)
    plan.sent_node(None)
    assert not plan.choose(True, lambda _: True).direct
    plan.sent_node(b"r")  # a later call with a return: done means the earlier one is too
    assert plan.choose(True, lambda _: True).direct


def _direct_plan() -> DirectPlan:
    """A plan whose calls go direct: one node call done, a connection up."""
    plan = DirectPlan(probe_after=1)
    plan.choose(True, _never)
    plan.probed(True)
    plan.sent_node(b"r")
    assert plan.choose(True, lambda _: True).direct
    return plan


def test_a_call_that_cannot_go_direct_waits_for_the_direct_calls_in_flight() -> None:
    plan = _direct_plan()
    plan.sent_direct()
    plan.sent_direct()
    choice = plan.choose(False, _never)
    assert not choice.direct and choice.drain
    plan.sent_node(b"n")
    plan.acked(2)
    assert plan.unacked == 0
    # Back to direct once that node call is done, and no drain without direct calls.
    assert not plan.choose(True, lambda _: False).direct
    assert plan.choose(True, lambda _: True).direct
    plan.direct = False
    assert not plan.choose(False, _never).drain


def test_a_lost_connection_sends_calls_through_the_node_and_looks_again_later() -> None:
    plan = _direct_plan()
    plan.sent_direct()
    plan.lost()
    assert plan.unacked == 0 and not plan.connected
    choice = plan.choose(True, _never)
    assert not choice.direct and not choice.probe
    assert plan.probe_at == plan.node_calls - 1 + plan.gap


def test_calls_and_replies_round_trip() -> None:
    frame = wire.encode_call(b"t" * 20, [b"r" * 20], "add", b"data", b"PICKLE5", {"job": b"j"})
    (n,) = wire.LENGTH.unpack(frame[:4])
    assert n == len(frame) - 4
    assert wire.decode_call(frame[4:]) == (
        b"t" * 20,
        [b"r" * 20],
        "add",
        b"data",
        b"PICKLE5",
        {"job": b"j"},
    )
    reply = wire.encode_reply([(b"d", b"m", [b"a" * 20])])
    assert wire.decode_reply(reply[4:]) == [(b"d", b"m", [b"a" * 20])]


@pytest.mark.parametrize(
    "body",
    [
        b"junk",
        wire.encode_reply([])[4:],  # a reply is not a call
        wire.encode_call(b"t", [], "f", b"", b"", {})[4:],  # no return id
    ],
)
def test_a_malformed_call_is_refused_with_a_typed_error(body: bytes) -> None:
    with pytest.raises(wire.Malformed):
        wire.decode_call(body)


def test_the_frame_reader_splits_what_one_recv_brought_and_refuses_a_huge_frame() -> None:
    a, b = socket.socketpair()
    with a, b:
        reader = wire.FrameReader(b, max_bytes=100)
        one, two = wire.encode_reply([]), wire.encode_reply([(b"x", b"", [])])
        a.sendall(one + two[:3])
        assert reader.frames() == [one[4:]]
        a.sendall(two[3:])
        assert reader.frames() == [two[4:]]
        a.sendall(wire.LENGTH.pack(101))
        with pytest.raises(wire.Malformed):
            reader.frames()
        a.close()
        assert wire.FrameReader(b).frames() is None


def test_a_record_id_is_in_the_nodes_namespace_and_no_task_makes_it() -> None:
    rid = wire.record_id(b"N" * 20, b"A" * 20)
    assert len(rid) == 20 and rid[:6] == b"N" * 6 and rid[6:16] == b"A" * 10
    assert rid[16:] == wire.RECORD_INDEX
