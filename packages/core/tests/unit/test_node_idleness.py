"""A node's own idleness figure (what its heartbeat reports as ``idle_duration_s``)."""

from __future__ import annotations

from typing import Any

import pytest

from rayfield._private.node_manager.idleness import IdleClock, is_idle
from rayfield._private.node_manager.membership import Membership, PeerView
from rayfield._private.protocol.types import NodeInfo


def snap(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "total": {"CPU": 2.0},
        "available": {"CPU": 2.0},
        "running": 0,
        "workers": {11: "idle", 12: "idle"},
        "ready_by_shape": [],
        "waiting_for_dependencies": 0,
        "infeasible": [],
        "actor_tasks_queued": 0,
    }
    return {**base, **changes}


def test_a_node_with_free_resources_and_no_work_is_idle() -> None:
    assert is_idle(snap())
    assert is_idle(snap(workers={}))  # no worker started yet


@pytest.mark.parametrize(
    "changes",
    [
        {"available": {"CPU": 1.0}},  # a lease
        {"running": 1},
        {"workers": {11: "busy"}},
        {"workers": {11: "blocked"}},  # in rf.get inside a task: its CPU lent back
        {"workers": {11: "actor"}, "available": {"CPU": 2.0}},  # a 0-CPU actor
        {"ready_by_shape": [({"CPU": 1.0}, 1)]},
        {"waiting_for_dependencies": 2},
        {"infeasible": [(b"t", {"GPU": 1.0}, "no GPU")]},
        {"actor_tasks_queued": 1},
    ],
)
def test_any_work_or_lease_makes_a_node_busy(changes: dict[str, Any]) -> None:
    assert not is_idle(snap(**changes))


def test_a_task_waiting_to_spill_makes_a_node_busy() -> None:
    assert not is_idle(snap(), spilling=1)


def test_idle_clock_counts_from_the_first_idle_observation() -> None:
    now = [100.0]
    clock = IdleClock(lambda: now[0])
    assert clock.observe(False) == 0.0
    assert clock.observe(True) == 0.0  # idle since this observation
    now[0] = 102.5
    assert clock.observe(True) == 2.5
    now[0] = 103.0
    assert clock.observe(False) == 0.0  # busy again: the count starts over
    now[0] = 104.0
    assert clock.observe(True) == 0.0
    now[0] = 105.0
    assert clock.observe(True) == 1.0


class _RecordingGcs:
    timeout_s = 1.0

    def __init__(self) -> None:
        self.beats: list[tuple[dict[str, float], float]] = []

    def with_limits(self, timeout_s: float, retry_deadline_s: float) -> _RecordingGcs:
        return self

    def heartbeat(
        self, node_id: bytes, available: dict[str, float], demand: Any, idle_s: float
    ) -> bool:
        self.beats.append((available, idle_s))
        return False

    def get_nodes(self) -> list[NodeInfo]:
        return []


def test_the_heartbeat_carries_the_idle_time() -> None:
    gcs = _RecordingGcs()
    now = [0.0]
    state = {"snap": snap(), "waiting": []}
    me = NodeInfo(node_id=b"M" * 20, address="a:1")
    membership = Membership(
        gcs,  # type: ignore[arg-type]
        me,
        PeerView(me.node_id, "a:1"),
        snapshot=lambda: state["snap"],
        infeasible=lambda snap: list(state["waiting"]),
        on_died=lambda node: None,
        after_round=lambda: None,
    )
    membership.idle = IdleClock(lambda: now[0])
    assert membership.beat()
    now[0] = 1.5
    assert membership.beat()
    state["waiting"] = [{"GPU": 1.0}]  # a task waits for a node with a GPU
    now[0] = 2.0
    assert membership.beat()
    assert [idle for _, idle in gcs.beats] == [0.0, 1.5, 0.0]
