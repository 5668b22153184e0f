"""What a node does with the work it sent to a node that died (``Recovery``), without
processes: a fake store records the error objects, a list the resubmitted specs."""

from __future__ import annotations

from rayfield._private.node_manager.recovery import Recovery
from rayfield._private.node_manager.task_spec import TaskSpec

ACTOR = b"a" * 20


def tid(n: int) -> bytes:
    return n.to_bytes(20, "big")


class Store:
    def __init__(self) -> None:
        self.errors: dict[bytes, str] = {}

    def put(self, object_id: bytes, data: bytes, metadata: bytes = b"") -> None:
        self.errors[object_id] = metadata.decode()


def recovery() -> tuple[Recovery, list[TaskSpec], Store]:
    store, again = Store(), []
    return Recovery(store, again.append), again, store  # type: ignore[arg-type]


def test_calls_of_a_restarted_actor_run_again_while_max_task_retries_allow() -> None:
    r, again, store = recovery()
    creation = TaskSpec(tid(1), b"", actor_id=ACTOR, actor_creation=True, max_retries=-1)
    retried = TaskSpec(tid(2), b"", actor_id=ACTOR, return_ids=(tid(20),), max_retries=2)
    failed = TaskSpec(tid(3), b"", actor_id=ACTOR, return_ids=(tid(30),), max_retries=0)
    for spec in (retried, failed, creation):  # calls recorded before their creation
        r.record(spec, "b:1")
    assert r.node_died("b:1") == [ACTOR]
    assert [s.task_id for s in again] == [tid(1), tid(2)]  # the creation first
    assert again[1].max_retries == 1
    assert store.errors == {tid(30): "ACTOR_DIED"}


def test_calls_of_an_actor_that_is_not_restarted_fail() -> None:
    r, again, store = recovery()
    creation = TaskSpec(tid(1), b"", actor_id=ACTOR, actor_creation=True, max_retries=0)
    call = TaskSpec(tid(2), b"", actor_id=ACTOR, return_ids=(tid(20),), max_retries=-1)
    r.record(creation, "b:1")
    r.record(call, "b:1")
    assert r.node_died("b:1") == []
    assert again == [] and store.errors == {tid(20): "ACTOR_DIED"}
