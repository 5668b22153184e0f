"""The node manager's pure parts: argument pins, the actor table, spillback decisions,
typed task specs and node events (no processes, no sockets)."""

from __future__ import annotations

import ast
import copy
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rayfield._private.node_manager import actor_routing
from rayfield._private.node_manager import events as ev
from rayfield._private.node_manager.actor_routing import (
    GATHER_CALLS,
    GATHER_MAX_S,
    OUTSTANDING_TTL_S,
    ActorRouter,
    ActorTable,
)
from rayfield._private.node_manager.arg_pins import ArgPins
from rayfield._private.node_manager.membership import Membership, PeerView
from rayfield._private.node_manager.placement import (
    REFUSED_RETRY_S,
    SENT_MEMORY_S,
    SpillTable,
    spill_order,
)
from rayfield._private.node_manager.spillback import Spillback
from rayfield._private.node_manager.task_spec import TakenTask, TaskSpec
from rayfield._private.protocol.types import NodeInfo


def tid(i: int) -> bytes:
    return i.to_bytes(20, "big")


# ---- argument pins --------------------------------------------------------------------


def test_arg_pins_are_dropped_once_every_result_is_back() -> None:
    pins = ArgPins()
    pins.hold(tid(1), "b:1", (tid(100), tid(101)), (tid(10), tid(11)))
    assert pins.result_back(tid(10)) == ()
    assert pins.result_back(tid(10)) == ()  # a second copy of a result: nothing
    assert pins.result_back(tid(11)) == (tid(100), tid(101))
    assert len(pins) == 0 and pins.result_back(tid(11)) == ()


def test_arg_pins_of_tasks_sent_to_a_dead_node_are_dropped_one_task_at_a_time() -> None:
    pins = ArgPins()
    pins.hold(tid(1), "b:1", (tid(100),), (tid(10),))
    pins.hold(tid(2), "b:1", (tid(100),), (tid(20),))  # the same argument, pinned twice
    pins.hold(tid(3), "c:1", (tid(300),), (tid(30),))
    assert sorted(pins.node_died("b:1")) == [(tid(100),), (tid(100),)]
    assert pins.result_back(tid(10)) == ()  # forgotten with its node
    assert pins.result_back(tid(30)) == (tid(300),)


def test_a_task_without_results_cannot_hold_its_arguments() -> None:
    with pytest.raises(ValueError, match="without results"):
        ArgPins().hold(tid(1), "b:1", (tid(100),), ())


# ---- actor routing table -----------------------------------------------------------------


def call(i: int) -> TakenTask:
    return TakenTask(TaskSpec(task_id=tid(i), payload=b"", actor_id=tid(99)))


def test_actor_calls_are_held_in_order_and_unsent_ones_go_back_first() -> None:
    table = ActorTable()
    for i in range(3):
        table.hold(tid(99), call(i))
    calls = table.take(tid(99))
    assert [c.spec.task_id for c in calls] == [tid(0), tid(1), tid(2)]
    assert table.waiting() == []
    table.hold(tid(99), call(3))  # submitted while the first ones were on their way
    table.put_back(tid(99), calls[1:])  # the node refused the second call
    assert [c.spec.task_id for c in table.take(tid(99))] == [tid(1), tid(2), tid(3)]


def test_actor_locations_are_forgotten_with_their_node() -> None:
    table = ActorTable()
    table.located(tid(1), "b:1")
    table.located(tid(2), "c:1")
    table.node_died("b:1")
    assert table.location(tid(1)) is None and table.location(tid(2)) == "c:1"


def test_peer_view_tells_deaths_once_and_finds_an_actors_home() -> None:
    me, b = b"A" * 20, b"B" * 20
    view = PeerView(me, "a:1")
    alive = [NodeInfo(node_id=me, address="a:1"), NodeInfo(node_id=b, address="b:1")]
    assert view.update(alive) == []
    assert [n.address for n in view.alive_peers()] == ["b:1"]
    assert view.home_of(b"B" * 6 + bytes(14)) == "b:1"
    assert view.home_of(b"A" * 6 + bytes(14)) is None  # homed here
    dead = [alive[0], NodeInfo(node_id=b, address="b:1", alive=False)]
    assert [n.address for n in view.update(dead)] == ["b:1"]
    assert view.update(dead) == []  # told once
    assert view.home_of(b"B" * 6 + bytes(14)) is None and not view.is_alive("b:1")


# ---- spillback decisions -----------------------------------------------------------------


def node(address: str, total: dict[str, float], free: dict[str, float]) -> NodeInfo:
    return NodeInfo(
        node_id=address.encode(),
        address=address,
        resources_total=total,
        resources_available=free,
    )


class _FakeGcs:
    """Answers register_node and get_nodes; every call after ``up_calls`` is refused."""

    timeout_s = 1.0

    def __init__(self, nodes: list[NodeInfo], up_calls: int) -> None:
        self.nodes, self.up_calls, self.calls = nodes, up_calls, 0

    def with_limits(self, timeout_s: float, retry_deadline_s: float) -> _FakeGcs:
        return self

    def _call(self) -> None:
        self.calls += 1
        if self.calls > self.up_calls:
            raise ConnectionError("GCS down")

    def register_node(self, node: NodeInfo) -> None:
        self._call()

    def get_nodes(self) -> list[NodeInfo]:
        self._call()
        return self.nodes


def test_a_node_knows_its_peers_from_its_start_even_if_the_gcs_dies_at_once() -> None:
    me, b = b"M" * 20, b"B" * 20
    nodes = [NodeInfo(node_id=me, address="a:1"), NodeInfo(node_id=b, address="b:1")]
    gcs = _FakeGcs(nodes, up_calls=2)  # register and one read, then the GCS is gone
    view = PeerView(me, "a:1")
    rounds: list[int] = []
    membership = Membership(
        gcs,  # type: ignore[arg-type]
        nodes[0],
        view,
        snapshot=lambda: {"available": {}},
        infeasible=lambda snap: [],
        on_died=lambda node: None,
        after_round=lambda: rounds.append(1),
        heartbeat_s=3600,
    )
    membership.start()
    try:
        assert [n.address for n in view.alive_peers()] == ["b:1"]
        assert membership.beat() is False  # the GCS is down: the view stands
        assert [n.address for n in view.alive_peers()] == ["b:1"] and rounds == [1]
    finally:
        membership.stop()


def test_an_infeasible_task_goes_to_fitting_nodes_most_free_first() -> None:
    nodes = [
        node("small:1", {"CPU": 1}, {"CPU": 1}),
        node("busy:1", {"CPU": 8, "GPU": 1}, {"CPU": 0, "GPU": 0}),
        node("idle:1", {"CPU": 8, "GPU": 1}, {"CPU": 6, "GPU": 1}),
    ]
    order = spill_order({"CPU": 2, "GPU": 1}, nodes)
    assert [n.address for n in order] == ["idle:1", "busy:1"]
    assert spill_order({"TPU": 1}, nodes) == []


def test_spill_table_waits_out_a_refusal_and_reports_waiting_demand() -> None:
    table = SpillTable()
    table.waiting(tid(1), {"GPU": 1})
    assert table.demands() == [{"GPU": 1}] and table.to_retry() == [(tid(1), {"GPU": 1})]
    table.taken(tid(1))
    assert table.demands() == []
    table.refused(tid(1), now=10.0)
    assert table.retry_later(tid(1), 10.0 + REFUSED_RETRY_S / 2)
    assert not table.retry_later(tid(1), 10.0 + REFUSED_RETRY_S)
    table.accepted(tid(1))
    assert not table.retry_later(tid(1), 10.0)


def test_recently_sent_work_counts_against_a_peers_free_resources() -> None:
    table = SpillTable()
    entry = (0.0, "b:1", {"CPU": 2.0})
    table.record_sent(entry)
    free = {"b:1": {"CPU": 3.0}, "c:1": {"CPU": 2.0}}
    loads = table.loads(free, now=0.5)
    assert [(p.address, p.available["CPU"]) for p in loads] == [("c:1", 2.0), ("b:1", 1.0)]
    table.sent_refused(entry)  # the peer refused it: it does not count any more
    assert table.loads(free, now=0.5)[0].available["CPU"] == 3.0
    table.record_sent(entry)
    assert table.loads(free, now=SENT_MEMORY_S)[0].available["CPU"] == 3.0  # forgotten


# ---- typed specs and events --------------------------------------------------------------


def test_a_native_spec_round_trips_and_reads_as_fields() -> None:
    native = {
        "task_id": tid(1),
        "payload": b"call",
        "resources": {"CPU": 1.0},
        "dependencies": [tid(2)],
        "actor_id": tid(3),
        "actor_creation": False,
        "max_concurrency": 1,
        "caller_id": tid(4),
        "sequence_no": 7,
        "return_ids": [tid(5)],
        "max_retries": -1,
        "actor_handles": [tid(3)],
        "scheduling": "SPREAD",
        "runtime_env": '{"env_vars":{"A":"1"}}',
    }
    taken = TakenTask.from_native(dict(native, kept_pins=[tid(2)], kept_handles=[]))
    spec = taken.spec
    assert spec.is_actor_call and spec.involves_actors and spec.sequence_no == 7
    assert taken.kept_pins == (tid(2),) and taken.kept_handles == ()
    assert spec.to_native() == native
    assert spec.replace(max_retries=0).max_retries == 0 and spec.max_retries == -1
    with pytest.raises(KeyError):
        TaskSpec.from_native({"payload": b""})


def test_native_events_become_typed_events() -> None:
    assert ev.from_native(("task_infeasible", tid(1), {"GPU": 1.0}, "no GPU")) == (
        ev.TaskInfeasible(tid(1), {"GPU": 1.0}, "no GPU")
    )
    assert ev.from_native(("owner_died", 3, 42, [tid(1)])) == ev.OwnerDied(3, 42, (tid(1),))
    assert ev.from_native(("store_full", 10, 100, 95)) == ev.StoreFull(10, 100, 95)
    assert ev.from_native(("client_disconnected", 3, 42, True)) == ev.ClientDisconnected(
        3, 42, True
    )
    assert ev.from_native(("task_placement", tid(1), "SPREAD", {"CPU": 1.0}, True)) == (
        ev.TaskPlacement(tid(1), "SPREAD", {"CPU": 1.0}, True)
    )
    assert ev.from_native(("dispatch", tid(1))) is None  # handled by the native core
    assert ev.from_native(()) is None


def test_node_events_are_frozen_values() -> None:
    event = ev.ObjectMissing(tid(1), 3)
    assert event == ev.ObjectMissing(object_id=tid(1), client=3)
    assert hash(event) == hash(ev.ObjectMissing(tid(1), client=3))
    assert event != ev.ObjectMissing(tid(1), 4)
    assert event != ev.ActorStateChanged(tid(1), True)  # same values, another kind
    assert event != (tid(1), 3)
    assert repr(event) == f"ObjectMissing(object_id={tid(1)!r}, client=3)"
    assert (event.object_id, event.client) == (tid(1), 3)
    assert ev.ObjectMissing.__match_args__ == ("object_id", "client")
    assert pickle.loads(pickle.dumps(event)) == event == copy.copy(event)
    assert "waits" in (ev.ObjectMissing.__doc__ or "")
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        event.client = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        event.other = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="missing client"):
        ev.ObjectMissing(tid(1))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 2 arguments"):
        ev.ObjectMissing(tid(1), 3, 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bad argument 'client'"):
        ev.ObjectMissing(tid(1), 3, client=4)  # type: ignore[misc]


# ---- the package's boundaries ------------------------------------------------------------


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside functions."""
    found = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            found.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module:
            found.add(n.module)
    return found


def test_only_node_service_imports_grpc_and_nothing_imports_the_layers_above() -> None:
    import rayfield._private.node_manager as nm

    above = (
        "rayfield.api",
        "rayfield.actor",
        "rayfield.remote_function",
        "rayfield._private.runtime",
    )
    files = sorted(Path(nm.__file__).parent.glob("*.py"))
    assert len(files) > 15
    for path in files:
        modules = imported_modules(path)
        grpc = {m for m in modules if m == "grpc" or m.startswith("grpc.")}
        assert not grpc or path.name == "node_service.py", f"{path.name} imports grpc"
        bad = {m for m in modules if m.startswith(above)}
        assert not bad, f"{path.name} imports {bad}, a layer above the node manager"
        assert len(path.read_text().splitlines()) <= 600, f"{path.name} is over 600 lines"


# ---- actor routing and spillback with fake collaborators ----------------------------------


class FakeGcs:
    def __init__(self) -> None:
        self.actors: dict[bytes, Any] = {}
        self.asked = 0

    def get_actor(self, actor_id: bytes) -> Any:
        self.asked += 1
        return self.actors.get(actor_id)

    def register_actor(self, info: Any) -> None:
        self.actors[info.actor_id] = info


class FakeWriter:
    """A GcsWriter that runs each write at once."""

    def __init__(self, gcs: FakeGcs) -> None:
        self.gcs = gcs

    def write(self, what: str, fn: Any) -> None:
        fn(self.gcs)


def inline(fn: Any, *args: Any) -> None:
    fn(*args)


def router(
    refuse_from: int = -1,
    dead: str | None = None,
    background: Any = inline,
    sender: Any = inline,
) -> tuple[ActorRouter, list[Any]]:
    log: list[Any] = []
    me, home = b"A" * 20, b"B" * 20
    peers = PeerView(me, "a:1")
    peers.update([NodeInfo(node_id=me, address="a:1"), NodeInfo(node_id=home, address="b:1")])

    def send(address: str, calls: list[TakenTask]) -> list[str | None]:
        out: list[str | None] = []
        for c in calls:
            n = int.from_bytes(c.spec.task_id, "big")
            out.append("busy" if 0 <= refuse_from <= n else None)
            log.append(("sent", address, n))
        return out

    gcs = FakeGcs()
    r = ActorRouter(
        me,
        gcs,  # type: ignore[arg-type]
        FakeWriter(gcs),  # type: ignore[arg-type]
        peers,
        dead=lambda actor_id: dead,
        fail=lambda ids, tag, why: log.append(("fail", tag, list(ids))),
        send=send,
        sent=lambda calls, address: log.extend(
            ("ok", int.from_bytes(c.spec.task_id, "big")) for c in calls
        ),
        drop=lambda c: log.append(("drop", int.from_bytes(c.spec.task_id, "big"))),
        background=background,
        sender=sender,
    )
    return r, log


ACTOR = b"B" * 6 + bytes(14)  # homed on node B, never moved


def actor_call(i: int) -> TakenTask:
    spec = TaskSpec(task_id=tid(i), payload=b"", actor_id=ACTOR, return_ids=(tid(100 + i),))
    return TakenTask(spec)


def test_calls_of_an_actor_that_never_moved_go_to_its_home_in_order() -> None:
    r, log = router()
    for i in range(3):
        r.call_elsewhere(ACTOR, actor_call(i))
    assert [e for e in log if e[0] == "ok"] == [("ok", 0), ("ok", 1), ("ok", 2)]
    assert r.table.location(ACTOR) == "b:1" and r.table.waiting() == []


def test_the_gcs_is_asked_once_off_the_callers_thread_and_never_once_the_node_is_known() -> None:
    deferred: list[Any] = []
    r, log = router(background=lambda fn, *args: deferred.append((fn, args)))
    for i in range(3):
        r.call_elsewhere(ACTOR, actor_call(i))
    assert len(deferred) == 1 and r.gcs.asked == 0  # one lookup queued, none run here
    assert not [e for e in log if e[0] == "ok"]  # the calls wait for it
    fn, args = deferred.pop()
    fn(*args)
    assert r.gcs.asked == 1
    assert [e for e in log if e[0] == "ok"] == [("ok", 0), ("ok", 1), ("ok", 2)]
    r.call_elsewhere(ACTOR, actor_call(3))
    assert ("ok", 3) in log and not deferred and r.gcs.asked == 1


def test_a_refused_call_is_held_with_those_after_it_until_the_next_try() -> None:
    r, log = router(refuse_from=1)
    r.call_elsewhere(ACTOR, actor_call(0))
    r.call_elsewhere(ACTOR, actor_call(1))
    r.call_elsewhere(ACTOR, actor_call(2))
    held = [c.spec.task_id for c in r.table.calls[ACTOR]]
    assert held == [tid(1), tid(2)] and ("ok", 0) in log and ("ok", 1) not in log


def test_calls_held_while_a_send_is_on_the_wire_go_together_next_in_order() -> None:
    started: list[Any] = []
    r, log = router(sender=lambda fn, *args: started.append((fn, args)))
    r.call_elsewhere(ACTOR, actor_call(0))
    assert len(started) == 1 and not log  # the caller is not held: a sender sends
    for i in (1, 2):  # arrive while that send is on its way: no second send starts
        r.call_elsewhere(ACTOR, actor_call(i))
    r.retry_waiting()
    assert len(started) == 1
    fn, args = started.pop()
    fn(*args)  # one drain sends them all, in order, and stops with nothing held
    assert [e[2] for e in log if e[0] == "sent"] == [0, 1, 2]
    assert ACTOR not in r.table.sending and r.table.waiting() == []
    r.call_elsewhere(ACTOR, actor_call(3))  # the next call starts a send again
    assert len(started) == 1


def test_a_refusal_ends_the_send_and_the_next_try_starts_another() -> None:
    started: list[Any] = []
    r, log = router(refuse_from=1, sender=lambda fn, *args: started.append((fn, args)))
    for i in range(3):
        r.call_elsewhere(ACTOR, actor_call(i))
    fn, args = started.pop()
    fn(*args)
    assert [e[1] for e in log if e[0] == "ok"] == [0]
    assert [c.spec.task_id for c in r.table.calls[ACTOR]] == [tid(1), tid(2)]
    assert ACTOR not in r.table.sending
    r.retry_waiting()  # after a heartbeat
    assert len(started) == 1


def test_a_send_that_raises_holds_its_calls_again() -> None:
    r, log = router()

    def broken(address: str, calls: list[TakenTask]) -> list[str | None]:
        raise ValueError("a malformed reply")

    r.send = broken
    r.call_elsewhere(ACTOR, actor_call(0))
    r.call_elsewhere(ACTOR, actor_call(1))
    assert [c.spec.task_id for c in r.table.calls[ACTOR]] == [tid(0), tid(1)]
    assert ACTOR not in r.table.sending and not [e for e in log if e[0] == "ok"]


def test_calls_of_a_dead_actor_fail_and_release_what_they_held() -> None:
    r, log = router(dead="the actor's node died")
    r.call_elsewhere(ACTOR, actor_call(0))
    assert log == [("fail", "ACTOR_DIED", [tid(100)]), ("drop", 0)]


def test_a_send_while_the_actors_node_has_calls_enough_waits_for_a_fuller_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nagle-like: with GATHER_CALLS calls of the actor still running on its node, a
    small batch waits until a result comes back (or it is full, or GATHER_MAX_S passed);
    with nothing in flight a call goes at once."""
    monkeypatch.setattr(actor_routing, "GATHER_MAX_S", 60.0)
    started: list[Any] = []
    r, log = router(sender=lambda fn, *args: started.append((fn, args)))
    r.call_elsewhere(ACTOR, actor_call(0))
    fn, args = started.pop()
    fn(*args)  # nothing in flight: no wait
    assert r.outstanding[ACTOR] == 1
    r.outstanding[ACTOR] = GATHER_CALLS  # the actor's node has a batch of work queued
    r._touched[ACTOR] = time.monotonic() + 60  # and results come back (not stale)
    r.call_elsewhere(ACTOR, actor_call(1))
    fn, args = started.pop()
    t = threading.Thread(target=fn, args=args)
    t.start()
    r.results_back([ACTOR])  # a result came back: fewer than a batch left there
    t.join(timeout=30)  # well before GATHER_MAX_S: the result ended the wait
    assert not t.is_alive() and [e[2] for e in log if e[0] == "sent"] == [0, 1]
    assert r.outstanding[ACTOR] == GATHER_CALLS  # one back, one more sent
    r.results_back([ACTOR] * GATHER_CALLS)
    assert ACTOR not in r.outstanding


def test_a_gathering_send_never_waits_past_its_limit() -> None:
    started: list[Any] = []
    r, log = router(sender=lambda fn, *args: started.append((fn, args)))
    r.outstanding[ACTOR] = 10 * GATHER_CALLS  # results that never come back here
    r._touched[ACTOR] = time.monotonic() + 60
    r.call_elsewhere(ACTOR, actor_call(0))
    fn, args = started.pop()
    t0 = time.monotonic()
    fn(*args)
    assert [e[2] for e in log if e[0] == "sent"] == [0]
    assert time.monotonic() - t0 < GATHER_MAX_S + 1.0


def test_a_count_of_calls_in_flight_that_stopped_changing_is_stale() -> None:
    """Calls whose results are never asked for here never come back: once the count has
    not changed for OUTSTANDING_TTL_S, a lone call goes at once again."""
    r, log = router()
    r.outstanding[ACTOR] = 10 * GATHER_CALLS
    r._touched[ACTOR] = time.monotonic() - 2 * OUTSTANDING_TTL_S
    r.call_elsewhere(ACTOR, actor_call(0))
    assert [e[2] for e in log if e[0] == "sent"] == [0]
    assert r.outstanding[ACTOR] == 1  # counted from zero again: no wait for a batch


def test_a_batch_of_calls_taken_is_booked_in_one_call_in_order() -> None:
    batches: list[list[int]] = []
    r, _ = router(refuse_from=3)
    r.sent = lambda calls, address: batches.append(
        [int.from_bytes(c.spec.task_id, "big") for c in calls]
    )
    deferred: list[Any] = []
    r._sender = lambda fn, *args: deferred.append((fn, args))
    for i in range(5):
        r.call_elsewhere(ACTOR, actor_call(i))
    fn, args = deferred.pop()
    fn(*args)
    assert batches == [[0, 1, 2]]  # the refused call and the one after it stay held
    assert [c.spec.task_id for c in r.table.calls[ACTOR]] == [tid(3), tid(4)]


class FakeQueue:
    def __init__(self) -> None:
        self.queued = {tid(1): {"task_id": tid(1), "payload": b"", "kept_pins": [tid(50)]}}

    def take_task(self, task_id: bytes, pin_for: int = 0) -> dict[str, Any] | None:
        return self.queued.pop(task_id, None)

    def scheduler_snapshot(self) -> dict[str, Any]:
        return {
            "available": {},
            "ready_tasks": [],
            "infeasible": [(t, {}, "") for t in self.queued],
        }


class FakeForwarder:
    def __init__(self, refuse: set[str]) -> None:
        self.refuse = refuse
        self.tried: list[str] = []

    def submit(self, address: str, spec: TaskSpec, pushed: list[bytes], done: Any) -> None:
        self.tried.append(address)
        done("full" if address in self.refuse else None)


def spillback(refuse: set[str]) -> tuple[Spillback, FakeForwarder, list[Any]]:
    log: list[Any] = []
    peers = PeerView(b"me", "a:1")
    peers.update(
        [
            node("small:1", {"CPU": 1.0}, {"CPU": 1.0}),
            node("big:1", {"GPU": 2.0}, {"GPU": 2.0}),
            node("big:2", {"GPU": 2.0}, {"GPU": 1.0}),
        ]
    )
    fwd = FakeForwarder(refuse)
    s = Spillback(
        FakeQueue(),
        client_id=7,
        peers=peers,
        forwarder=fwd,  # type: ignore[arg-type]
        push_args=lambda address, spec: [],
        on_sent=lambda taken, peer: log.append(("sent", peer.address)),
        give_back=lambda taken: log.append(("back", taken.kept_pins)),
        stay=set,
    )
    return s, fwd, log


def test_an_infeasible_task_is_forwarded_to_the_fitting_node_with_most_free() -> None:
    s, fwd, log = spillback(refuse={"big:1"})
    assert s.spill(tid(1), {"GPU": 1.0})
    assert fwd.tried == ["big:1", "big:2"] and log == [("sent", "big:2")]
    assert s.demands() == []


def test_the_order_of_peers_is_kept_for_a_shape_until_the_view_changes() -> None:
    s, fwd, _log = spillback(refuse=set())
    s.queue.queued[tid(2)] = {"task_id": tid(2), "payload": b""}  # type: ignore[attr-defined]
    s.queue.queued[tid(3)] = {"task_id": tid(3), "payload": b""}  # type: ignore[attr-defined]
    assert s.spill(tid(1), {"GPU": 1.0}) and s.spill(tid(2), {"GPU": 1.0})
    assert fwd.tried == ["big:1", "big:1"] and len(s._orders) == 1
    s.peers.update([node("big:2", {"GPU": 2.0}, {"GPU": 1.0})])  # big:1 is gone
    assert s.spill(tid(3), {"GPU": 1.0}) and fwd.tried[-1] == "big:2"


def test_a_task_every_node_refuses_is_queued_here_again_and_waits() -> None:
    s, fwd, log = spillback(refuse={"big:1", "big:2"})
    assert s.spill(tid(1), {"GPU": 1.0})
    assert fwd.tried == ["big:1", "big:2"] and log == [
        ("back", (tid(50),))
    ]  # its argument pins go back with it
    assert s.table.retry_later(tid(1), time.monotonic())


def test_a_task_no_node_fits_waits_and_is_reported_as_demand() -> None:
    s, fwd, log = spillback(refuse=set())
    assert not s.spill(tid(1), {"TPU": 1.0})
    assert s.demands() == [{"TPU": 1.0}] and fwd.tried == [] and log == []


def test_the_event_shipper_stamps_each_event_with_its_node(tmp_path: Any) -> None:
    import json
    import types

    from rayfield._private.node_manager.event_shipper import EventShipper

    gcs = types.SimpleNamespace(timeout_s=1.0, with_limits=lambda *args, **kwargs: None)
    shipper = EventShipper(tmp_path, gcs, "10.0.0.1:5", b"\x01" * 20)  # type: ignore[arg-type]
    stamp = {"node": "10.0.0.1:5", "node_id": "01" * 20}
    for line, event in [
        (b'{"task_id":"ab","name":"f"}', {"task_id": "ab", "name": "f"}),
        (b" {} \n", {}),
        (b'{"node":"elsewhere","x":1}', {"x": 1}),  # the node's own stamp wins
    ]:
        out = shipper._stamped(line)
        assert out is not None and json.loads(out) == {**event, **stamp}
    assert shipper._stamped(b"not json") is None and shipper._stamped(b"  ") is None


def test_a_nodes_store_warms_an_eighth_of_itself_up_to_a_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rayfield._private.node_manager.node import (
        ENV_WARM_AHEAD,
        WARM_AHEAD_MAX_BYTES,
        warm_ahead_bytes,
    )

    monkeypatch.delenv(ENV_WARM_AHEAD, raising=False)
    assert warm_ahead_bytes(800 << 20) == 100 << 20
    assert warm_ahead_bytes(64 << 30) == WARM_AHEAD_MAX_BYTES
    monkeypatch.setenv(ENV_WARM_AHEAD, "0")
    assert warm_ahead_bytes(64 << 30) == 0
    monkeypatch.setenv(ENV_WARM_AHEAD, "12345")
    assert warm_ahead_bytes(64 << 30) == 12345
    for bad in ("-1", "1e6", "lots"):
        monkeypatch.setenv(ENV_WARM_AHEAD, bad)
        with pytest.raises(ValueError, match=ENV_WARM_AHEAD):
            warm_ahead_bytes(64 << 30)


class _Jobs:
    """A GCS that answers list_jobs and mark_job_finished from a table of JobInfo."""

    def __init__(self, jobs: list[Any]) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.marked: list[bytes] = []

    def list_jobs(self) -> list[Any]:
        return list(self.jobs.values())

    def mark_job_finished(self, job_id: bytes) -> None:
        self.marked.append(job_id)
        self.jobs[job_id].finished = True


def test_finish_on_node_cancels_a_killed_drivers_jobs_and_a_shut_down_drivers_newest() -> None:
    """A killed driver's running jobs are marked finished and returned; a driver whose
    ``shutdown()`` marked its job before the node saw the connection close still has
    that job returned (its queued tasks are cancelled); other drivers' and nodes' jobs,
    and the driver's older finished jobs, are left alone."""
    from rayfield._private.node_manager.jobs import finish_on_node
    from rayfield._private.protocol.types import JobInfo

    def job(i: int, pid: int, node: bytes, start: float, finished: bool) -> JobInfo:
        info = JobInfo(bytes([i]) * 4, driver_pid=pid, node_id=node)
        info.start_time_s, info.finished = start, finished
        return info

    running = _Jobs([job(1, 7, b"n1", 10.0, False), job(2, 8, b"n1", 11.0, False)])
    assert finish_on_node(running, b"n1", 7) == [bytes([1]) * 4]
    assert running.marked == [bytes([1]) * 4]

    shut_down = _Jobs(
        [
            job(1, 7, b"n1", 10.0, True),  # an earlier init() of the same process
            job(2, 7, b"n1", 20.0, True),  # the one whose connection just closed
            job(3, 7, b"n2", 30.0, True),  # same pid on another node
        ]
    )
    assert finish_on_node(shut_down, b"n1", 7) == [bytes([2]) * 4]
    assert shut_down.marked == []

    class Down:
        def list_jobs(self) -> list[Any]:
            raise ConnectionError("GCS down")

    assert finish_on_node(Down(), b"n1", 7) == []
