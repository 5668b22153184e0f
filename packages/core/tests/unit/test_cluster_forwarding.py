"""Batched forwarding and the long poll's messages, without processes."""

from __future__ import annotations

import threading
import types
from collections.abc import Sequence
from typing import Any

import grpc
import pytest

from rayfield._private.node_manager import forwarding
from rayfield._private.node_manager.fetch_state import Fetch, FetchState
from rayfield._private.node_manager.forwarding import AcceptedTasks, Forwarder, batches
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.node_manager.node_service import NodeService, PeerError
from rayfield._private.node_manager.task_spec import TaskSpec
from rayfield._private.protocol import messages
from rayfield._private.protocol.types import NodeInfo
from rayfield.testing import wait_for


def tid(i: int) -> bytes:
    return i.to_bytes(20, "little")


def spec(i: int, payload: bytes = b"p") -> TaskSpec:
    return TaskSpec(
        task_id=tid(i),
        payload=payload,
        resources={"CPU": 1.0},
        dependencies=(tid(1000 + i),),
        return_ids=(tid(2000 + i),),
    )


def test_id_vectors_round_trip_and_a_short_vector_is_malformed() -> None:
    ids = [tid(i) for i in range(1000)]
    assert messages.decode_ids(messages.encode_ids(ids, 7)) == (ids, 7)
    assert messages.decode_ids(messages.encode_ids([], 0)) == ([], 0)
    with pytest.raises(ValueError):
        messages.encode_ids([b"short"])
    raw = messages.encode_ids(ids)
    with pytest.raises(messages.MalformedMessage):
        messages.decode_ids(raw[: len(raw) // 2])
    flags = [i % 3 == 0 for i in range(100)]
    assert messages.decode_present(messages.encode_present(flags)) == flags


def test_forward_batch_round_trip() -> None:
    tasks = [(spec(1).to_native(), [tid(1001)]), (spec(2, b"x" * 100).to_native(), [])]
    decoded, in_order = messages.decode_forward_batch(
        messages.encode_forward_batch("a:1", tasks, in_order=True)
    )
    assert in_order is True
    assert TaskSpec.from_native(decoded[0][1]) == spec(1)
    assert [(o, s["task_id"], s["payload"], p) for o, s, p in decoded] == [
        ("a:1", tid(1), b"p", [tid(1001)]),
        ("a:1", tid(2), b"x" * 100, []),
    ]
    replies = [None, "ValueError: no", None]
    assert messages.decode_forward_batch_reply(messages.encode_forward_batch_reply(replies)) == (
        replies
    )


def test_fetch_round_trip() -> None:
    ids = [tid(1), tid(2), tid(3)]
    assert messages.decode_fetch(messages.encode_fetch(ids, 1000, 1 << 20)) == (ids, 1000, 1 << 20)
    raw = messages.encode_fetch_reply(
        [True, False, True], [(tid(1), b"meta", b"data"), (tid(3), b"", b"")]
    )
    present, objects = messages.decode_fetch_reply(raw)
    assert present == [True, False, True]
    assert objects == {tid(1): (b"meta", b"data"), tid(3): (b"", b"")}
    with pytest.raises(messages.MalformedMessage):
        messages.decode_fetch_reply(raw[:10])


def test_batches_cut_by_count_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarding, "MAX_BATCH_TASKS", 3)
    monkeypatch.setattr(forwarding, "MAX_BATCH_BYTES", 10)
    specs = [spec(i, b"x" * n) for i, n in enumerate([1, 1, 1, 1, 20, 4, 4, 4])]
    sizes = [[len(s.payload) for s in b] for b in batches(specs, lambda s: s)]
    assert sizes == [[1, 1, 1], [1], [20], [4, 4], [4]]


class FakePeer:
    """A peer's ForwardTasks: records batches, refuses the tasks in ``refuse``, and
    holds the first call until ``release`` so that later tasks queue up."""

    def __init__(self, refuse: Sequence[bytes] = (), fail: bool = False) -> None:
        self.batches: list[list[bytes]] = []
        self.refuse = set(refuse)
        self.fail = fail
        self.release = threading.Event()

    def send(self, address: str, tasks: Sequence[tuple[TaskSpec, list[bytes]]]) -> Any:
        self.release.wait(5)
        self.batches.append([s.task_id for s, _ in tasks])
        if self.fail:
            raise ConnectionError("peer gone")
        return [("no" if s.task_id in self.refuse else None) for s, _ in tasks]


def test_forwarder_batches_what_queues_up_and_reports_each_task_in_order() -> None:
    peer = FakePeer(refuse=[tid(3)])
    fwd = Forwarder(peer.send)
    outcomes: list[tuple[int, str | None]] = []
    try:
        for i in range(6):
            fwd.submit("p:1", spec(i), [], lambda why, i=i: outcomes.append((i, why)))
        peer.release.set()
        wait_for(lambda: len(outcomes) == 6, message="six reports")
    finally:
        fwd.close()
    assert outcomes == [(0, None), (1, None), (2, None), (3, "no"), (4, None), (5, None)]
    # the first call took what was queued then; the rest queued up behind it: one more
    assert sum(len(b) for b in peer.batches) == 6 and len(peer.batches) <= 2
    assert fwd.pending() == 0


def test_a_failed_call_refuses_every_task_of_its_batch_and_close_refuses_the_queue() -> None:
    peer = FakePeer(fail=True)
    peer.release.set()
    fwd = Forwarder(peer.send)
    got: list[str | None] = []
    fwd.submit("p:1", spec(1), [], got.append)
    wait_for(lambda: len(got) == 1, message="the report")
    assert got[0] is not None and "peer gone" in got[0]
    fwd.close()
    fwd.submit("p:1", spec(2), [], got.append)
    assert got[1] == "the node is shutting down"


class FakeAgent:
    def __init__(self, refuse: bytes) -> None:
        self.refuse = refuse
        self.accepted: list[bytes] = []

    def accept_forwarded(self, origin: str, spec: TaskSpec, pushed: list[bytes]) -> None:
        if spec.task_id == self.refuse:
            raise RuntimeError("store full")
        self.accepted.append(spec.task_id)


@pytest.mark.parametrize("in_order", [False, True])
def test_forward_tasks_refuses_one_task_or_with_in_order_the_rest(in_order: bool) -> None:
    agent = FakeAgent(refuse=tid(2))
    service = NodeService(agent)  # type: ignore[arg-type]
    raw = messages.encode_forward_batch(
        "a:1", [(spec(i).to_native(), []) for i in range(1, 5)], in_order
    )
    replies = messages.decode_forward_batch_reply(service.forward_tasks(raw))
    assert replies[0] is None and replies[1] == "RuntimeError: store full"
    if in_order:  # calls of one actor: none runs before a call that came before it
        assert agent.accepted == [tid(1)]
        assert all(r is not None and "store full" in r for r in replies[2:])
    else:
        assert agent.accepted == [tid(1), tid(3), tid(4)] and replies[2:] == [None, None]


def test_an_argument_announced_before_its_task_came_is_fetched_at_once() -> None:
    # A large argument's announce (PushObject without data) may beat the ForwardTask
    # naming it; the task's arrival must not then wait PUSH_FALLBACK_S for a push.
    # It is pulled from the node that announced it, with no long poll of that node first.
    state = FetchState(is_code=lambda oid: False)
    state.announced_by(tid(1), "origin:1")
    assert state.want(tid(1), 5.0, "origin:1", delay_s=1.0) == [Fetch(tid(1), ("origin:1",))]
    assert state.want(tid(2), 5.0, "origin:1", delay_s=1.0) == []
    assert tid(1) in state.inflight and state.wanted[tid(2)][0] == 6.0


def test_accepted_tasks_tell_a_retry_apart_and_stay_bounded() -> None:
    now = [0.0]
    accepted = AcceptedTasks(max_ids=3, max_age_s=10.0, clock=lambda: now[0])
    assert accepted.take(tid(1)) and accepted.take(tid(2))
    assert not accepted.take(tid(1))  # a retried call: taken already
    accepted.take(tid(3))
    accepted.take(tid(4))  # past max_ids: the oldest goes
    assert tid(1) not in accepted and len(accepted) == 3
    now[0] = 11.0  # past max_age_s: every id goes
    assert accepted.take(tid(5)) and accepted.ids() == {tid(5)}


class LateAgent:
    """An agent's accept side as the node service calls it (``AcceptedTasks`` dedup)."""

    def __init__(self) -> None:
        self.accepted = AcceptedTasks()
        self.queued: list[bytes] = []

    def accept_forwarded(self, origin: str, spec: TaskSpec, pushed: list[bytes]) -> None:
        if self.accepted.take(spec.task_id):
            self.queued.append(spec.task_id)


def test_a_retried_forward_call_queues_no_task_twice() -> None:
    agent = LateAgent()
    service = NodeService(agent)  # type: ignore[arg-type]
    raw = messages.encode_forward_batch("a:1", [(spec(i).to_native(), []) for i in range(1, 4)])
    first = messages.decode_forward_batch_reply(service.forward_tasks(raw))
    again = messages.decode_forward_batch_reply(service.forward_tasks(raw))  # reply was lost
    assert first == again == [None, None, None]
    assert agent.queued == [tid(1), tid(2), tid(3)]


class FlakyStub:
    """A peer whose first ``fail`` calls time out (after taking the batch)."""

    def __init__(self, fail: int, code: Any) -> None:
        self.fail, self.code, self.calls = fail, code, 0

    def forward_batch(self, origin: str, tasks: Any, in_order: bool) -> list[str | None]:
        self.calls += 1
        if self.calls <= self.fail:
            raise PeerError(self.code, "late")
        return [None] * len(tasks)


class FakeChannels:
    def __init__(self, stub: FlakyStub) -> None:
        self._stub = stub

    def stub(self, address: str) -> FlakyStub:
        return self._stub


def agent_with(stub: FlakyStub, alive: bool = True) -> Any:
    from rayfield._private.node_manager.agent import NodeAgent

    agent = NodeAgent.__new__(NodeAgent)
    agent.address = "a:1"
    agent.peers = PeerView(b"me", "a:1")
    agent.peers.update([NodeInfo(node_id=b"p", address="p:1", alive=alive)])
    agent.channels = FakeChannels(stub)  # type: ignore[assignment]
    return agent


def test_a_call_that_timed_out_is_made_again_while_the_peer_lives() -> None:
    stub = FlakyStub(fail=2, code=grpc.StatusCode.DEADLINE_EXCEEDED)
    assert agent_with(stub).send_batch("p:1", [(spec(1), [])]) == [None]
    assert stub.calls == 3
    stub = FlakyStub(fail=9, code=grpc.StatusCode.DEADLINE_EXCEEDED)
    outcome = agent_with(stub, alive=False).send_batch("p:1", [(spec(1), [])])
    assert stub.calls == 1 and outcome[0] is not None and "DEADLINE_EXCEEDED" in outcome[0]
    stub = FlakyStub(fail=1, code=grpc.StatusCode.INVALID_ARGUMENT)  # a refusal: not retried
    assert agent_with(stub).send_batch("p:1", [(spec(1), [])])[0] is not None
    assert stub.calls == 1


def test_has_objects_answers_from_a_real_store_without_fetching(
    tmp_path: Any,
) -> None:
    from rayfield.store import StoreClient
    from rayfield.store.testing import local_node

    with local_node(tmp_path) as node, StoreClient(node.socket_path) as store:
        store.put(tid(1), b"sealed")
        view = store.create(tid(2), 4)  # created, not sealed: not present yet
        view.release()
        agent = types.SimpleNamespace(store=store)
        service = NodeService(agent)  # type: ignore[arg-type]
        ids = [tid(1), tid(2), tid(3)]
        raw = service.has_objects(messages.encode_ids(ids))
        assert messages.decode_present(raw) == [True, False, False]
        assert messages.decode_present(service.has_objects(messages.encode_ids([]))) == []
        # a missing id starts no fetch: the native node reported nothing for the host
        assert not [e for e in node.poll_events(timeout_s=0) if e[0] == "object_missing"]
        store.abort(tid(2))
