"""News that must not wait for a periodic heartbeat: a node's demand that grew (the
heartbeat pacer) and a node that joined (the peer view and the spillback pass it starts).
Pure parts, no processes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from rayfield._private.node_manager.beat_pacer import BeatPacer, DemandKey, demand_key, grew
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.node_manager.spillback import Spillback
from rayfield._private.node_manager.task_spec import TaskSpec
from rayfield._private.protocol.types import NodeInfo

CPU1 = ({"CPU": 1.0}, 1)


def key(
    ready: Sequence[tuple[dict[str, float], int]], infeasible: Sequence[dict[str, float]] = ()
) -> dict[DemandKey, int]:
    return demand_key(ready, infeasible)


# ---- the heartbeat pacer ------------------------------------------------------------------


def test_without_new_demand_beats_are_periodic() -> None:
    pacer = BeatPacer(0.5, now=10.0)
    assert pacer.due_at() == 10.5 and pacer.wait_s(10.2) == pytest.approx(0.3)
    assert not pacer.observe({}, 10.2)  # nothing to say
    pacer.beaten({}, 10.5)
    assert pacer.due_at() == 11.0 and pacer.wait_s(11.3) == 0.0


def test_a_demand_that_grew_goes_out_after_the_debounce_and_a_burst_sends_one_beat() -> None:
    pacer = BeatPacer(30.0, now=0.0, debounce_s=0.02, min_gap_s=0.1)
    assert pacer.observe(key([], [{"y": 1.0}]), 5.0)  # a first infeasible task
    assert pacer.due_at() == pytest.approx(5.02)
    for i in range(2, 50):  # the rest of the burst: the same beat carries them
        assert not pacer.observe(key([], [{"y": 1.0}] * i), 5.0 + i * 1e-4)
    assert pacer.due_at() == pytest.approx(5.02)
    pacer.beaten(key([], [{"y": 1.0}] * 49), 5.02)
    assert pacer.due_at() == pytest.approx(35.02) and not pacer.early


def test_an_early_beat_keeps_its_distance_from_the_last_beat() -> None:
    pacer = BeatPacer(0.5, now=0.0, debounce_s=0.02, min_gap_s=0.1)
    pacer.beaten(key([CPU1]), 1.0)
    assert pacer.observe(key([({"CPU": 1.0}, 2)]), 1.01)  # grew right after a beat
    assert pacer.due_at() == pytest.approx(1.1)


def test_only_growth_over_what_was_sent_calls_for_an_early_beat() -> None:
    sent = key([({"CPU": 1.0}, 5)], [{"GPU": 1.0}])
    assert not grew(sent, key([({"CPU": 1.0}, 3)]))  # shrank: the period will say it
    assert not grew(sent, key([({"CPU": 1.0}, 5)], [{"GPU": 1.0}]))
    assert grew(sent, key([({"CPU": 1.0}, 6)]))  # more of a shape
    assert grew(sent, key([({"CPU": 2.0}, 1)]))  # a new shape
    assert grew(sent, key([], [{"GPU": 1.0}, {"GPU": 1.0}]))  # a second infeasible task
    # queued and infeasible demand of one shape are different kinds
    assert grew(key([({"GPU": 1.0}, 1)]), key([], [{"GPU": 1.0}]))
    pacer = BeatPacer(0.5, now=0.0)
    pacer.beaten(sent, 1.0)
    assert not pacer.observe(key([({"CPU": 1.0}, 1)]), 1.2)
    assert pacer.due_at() == 1.5


@pytest.mark.parametrize(
    "kwargs", [{"period_s": 0}, {"period_s": math.nan}, {"period_s": 1, "debounce_s": -1}]
)
def test_bad_pacing_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="second"):
        BeatPacer(now=0.0, **kwargs)


# ---- a node that joins --------------------------------------------------------------------


def node(name: str, total: dict[str, float], alive: bool = True) -> NodeInfo:
    return NodeInfo(
        node_id=name.encode().ljust(20, b"."),
        address=f"{name}:1",
        alive=alive,
        resources_total=total,
        resources_available=dict(total),
    )


def test_the_view_reports_a_node_that_joined_once() -> None:
    me = node("me", {"CPU": 1.0})
    view = PeerView(me.node_id, me.address)
    view.update([me, node("old", {"CPU": 1.0})])
    assert not view.joined(me)  # this node's own registration
    assert not view.joined(node("old", {"CPU": 1.0}))  # known alive: its record stands
    assert not view.joined(node("gone", {"CPU": 1.0}, alive=False))
    new = node("new", {"x": 1.0})
    assert view.joined(new)
    assert not view.joined(new)  # published again (re-registration): no news
    assert [n.address for n in view.alive_peers()] == ["old:1", "new:1"]
    view.update([me, node("old", {"CPU": 1.0}), node("new", {"x": 1.0}, alive=False)])
    assert view.joined(new)  # back after it was dead: it joined again


class Queue:
    def __init__(self) -> None:
        self.queued = {b"t" * 20: {"task_id": b"t" * 20, "payload": b"", "kept_pins": []}}

    def take_task(self, task_id: bytes, pin_for: int = 0) -> dict[str, Any] | None:
        return self.queued.pop(task_id, None)

    def scheduler_snapshot(self) -> dict[str, Any]:
        held = [(t, {}, "") for t in self.queued]  # the native core holds them as infeasible
        return {"available": {}, "ready_tasks": [], "ready_by_shape": [], "infeasible": held}


class Forwarder:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def submit(self, address: str, spec: TaskSpec, pushed: list[bytes], done: Any) -> None:
        self.sent.append(address)
        done(None)


def test_a_task_waiting_for_a_fitting_node_goes_to_it_when_it_joins() -> None:
    me = node("me", {"CPU": 1.0})
    view = PeerView(me.node_id, me.address)
    view.update([me])
    fwd, sent, nudges = Forwarder(), [], []
    spill = Spillback(
        Queue(),
        client_id=7,
        peers=view,
        forwarder=fwd,  # type: ignore[arg-type]
        push_args=lambda address, spec: [],
        on_sent=lambda taken, peer: sent.append(peer.address),
        give_back=lambda taken: None,
        stay=set,
        on_demand=lambda: nudges.append(1),
    )
    assert not spill.spill(b"t" * 20, {"x": 1.0})  # no node has x: it waits here
    assert spill.demands() == [{"x": 1.0}] and nudges == [1]  # the heartbeat is nudged
    assert not spill.spill(b"t" * 20, {"x": 1.0})  # tried again, still waiting: no news
    assert nudges == [1]
    other = node("other", {"CPU": 4.0})
    assert view.joined(other)
    spill.node_joined(other)  # a node without x: it still waits
    assert fwd.sent == [] and spill.demands() == [{"x": 1.0}]
    new = node("new", {"x": 1.0})
    assert view.joined(new)
    spill.node_joined(new)
    assert fwd.sent == ["new:1"] and sent == ["new:1"] and spill.demands() == []


def lone_spillback(queue: Queue, **kw: Any) -> Spillback:
    """A Spillback of a node alone in its view, forwarding nothing."""
    return Spillback(
        queue,
        client_id=7,
        peers=PeerView(b"me", "me:1"),
        forwarder=Forwarder(),  # type: ignore[arg-type]
        push_args=lambda address, spec: [],
        on_sent=lambda taken, peer: None,
        give_back=lambda taken: None,
        stay=set,
        **kw,
    )


def test_a_waiting_task_that_is_cancelled_leaves_the_demand() -> None:
    """A job's infeasible tasks end with it: when the native core no longer holds one
    (cancelled, or its driver exited), the heartbeat's demand drops it."""
    queue = Queue()
    spill = lone_spillback(queue)
    assert not spill.spill(b"t" * 20, {"x": 1.0})
    assert spill.demands() == [{"x": 1.0}]
    queue.queued.clear()  # cancelled in the native core
    assert spill.demands() == [] and spill.table.to_retry() == []


def test_the_placement_loop_nudges_the_heartbeat_when_the_ready_queue_changes() -> None:
    snaps = [
        {"available": {}, "ready_tasks": [], "ready_by_shape": []},
        {"available": {}, "ready_tasks": [], "ready_by_shape": [({"CPU": 1.0}, 3)]},
        {"available": {}, "ready_tasks": [], "ready_by_shape": [({"CPU": 1.0}, 3)]},
        {"available": {}, "ready_tasks": [], "ready_by_shape": [({"CPU": 1.0}, 4)]},
        {"available": {}, "ready_tasks": [], "ready_by_shape": []},
    ]
    queue = Queue()
    queue.scheduler_snapshot = lambda: snaps.pop(0)  # type: ignore[method-assign]
    nudges: list[int] = []
    spill = lone_spillback(queue, on_demand=lambda: nudges.append(1))
    for _ in range(5):
        spill.place_by_load()
    assert nudges == [1, 1]  # a queue that appeared, then grew; not an unchanged or empty one
