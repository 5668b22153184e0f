"""The monitor's early steps: DemandWatch (pure) and wait_for_step (with a fake clock)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rayfield.autoscaler import monitor
from rayfield.autoscaler.monitor import ClusterGcs, wait_for_step
from rayfield.autoscaler.trigger import DemandWatch, signature


def row(
    node: str, demand: list[dict[str, Any]] | None = None, alive: bool = True
) -> dict[str, Any]:
    return {"node_id": node, "alive": alive, "demand": demand or []}


def cpu(count: int, infeasible: bool = True) -> dict[str, Any]:
    return {"shape": {"CPU": 1.0}, "count": count, "infeasible": infeasible}


def test_signature_ignores_order_and_dead_nodes() -> None:
    a = [row("h", [cpu(2)]), row("w", [{"shape": {"GPU": 1, "CPU": 2}, "count": 1}])]
    b = [row("w", [{"shape": {"CPU": 2, "GPU": 1}, "count": 1}]), row("h", [cpu(2)])]
    assert signature(a) == signature(b)
    assert signature([*a, row("dead", [cpu(5)], alive=False)]) == signature(a)


def test_new_demand_or_node_is_due_after_the_gap() -> None:
    watch = DemandWatch(min_gap_s=0.2)
    assert watch.due([row("h")], 0.0)  # no step yet
    watch.stepped([row("h")], 10.0)
    assert not watch.due([row("h")], 11.0)  # nothing changed
    assert not watch.due([row("h", [cpu(1)])], 10.1)  # changed, within the gap
    assert watch.due([row("h", [cpu(1)])], 10.25)
    assert watch.due([row("h"), row("w")], 10.5)  # a node joined
    watch.stepped([row("h", [cpu(1)])], 11.0)
    assert watch.due([row("h", [cpu(3)])], 12.0)  # more of the same shape
    assert watch.due([row("h", [cpu(1, infeasible=False)])], 12.0)
    assert watch.due([row("h")], 12.0)  # the demand went away


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0


class FakeStop(threading.Event):
    """An event whose waits advance a fake clock instead of sleeping."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        self.clock.now += timeout or 0.0
        return self.is_set()


def test_wait_returns_at_the_first_poll_with_new_demand() -> None:
    clock = FakeClock()
    watch = DemandWatch(min_gap_s=0.0)
    watch.stepped([row("h")], 0.0)
    polls: list[float] = []

    def poll() -> list[dict[str, Any]] | None:
        polls.append(clock.now)
        if len(polls) == 2:
            return None  # the GCS did not answer: the wait goes on
        return [row("h", [cpu(1)])] if clock.now >= 0.45 else [row("h")]

    wait_for_step(FakeStop(clock), 5.0, poll, watch, 0.1, lambda: clock.now)
    assert 0.45 <= clock.now < 0.55  # the first poll after the demand, not 5 s
    assert len(polls) == 5


def test_wait_runs_its_full_time_on_a_quiet_cluster_and_stops_when_told() -> None:
    clock = FakeClock()
    watch = DemandWatch()
    watch.stepped([row("h")], 0.0)
    wait_for_step(FakeStop(clock), 1.0, lambda: [row("h")], watch, 0.3, lambda: clock.now)
    assert abs(clock.now - 1.0) < 1e-9
    stop = FakeStop(clock)
    stop.set()
    calls: list[int] = []
    wait_for_step(stop, 10.0, lambda: calls.append(1) or [], watch, 0.1, lambda: clock.now)
    assert calls == []


class FakeStateClient:
    opened = 0

    def __init__(self, fail: bool = False) -> None:
        FakeStateClient.opened += 1
        self.fail = fail
        self.closed = False

    def node_records(self) -> list[dict[str, Any]]:
        if self.fail:
            raise ConnectionError("GCS down")
        return [row("h")]

    def close(self) -> None:
        self.closed = True


def test_cluster_gcs_keeps_one_connection_and_reopens_after_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clients = [FakeStateClient(), FakeStateClient(fail=True), FakeStateClient()]
    handed = iter([None, *clients])  # no head at first
    monkeypatch.setattr(monitor, "_client", lambda provider: next(handed))
    gcs = ClusterGcs(provider=None)  # type: ignore[arg-type]
    assert gcs.node_records() == []  # no head: nothing to read
    assert gcs.node_records() == gcs.poll() == [row("h")]  # one connection, kept
    clients[0].fail = True
    assert gcs.poll() is None and clients[0].closed  # failed: closed
    with pytest.raises(ConnectionError):
        gcs.node_records()  # the next one is opened, and fails too
    assert clients[1].closed
    assert gcs.node_records() == [row("h")]
    gcs.close()
    assert clients[2].closed
