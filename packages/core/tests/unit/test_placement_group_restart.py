"""An actor restarted in a bundle that moved to a new node holds the bundle there: the
GCS's table, the new node's ledger and its native scheduler, without processes."""

from __future__ import annotations

from test_placement_group_gcs import FakeKv, create, node, sync_until_quiet

from rayfield._private.common.placement_groups import GroupRef, bundle_demand
from rayfield._private.gcs.groups import GcsGroups
from rayfield._private.node_manager.bundles import BundleLedger
from rayfield.store._native import SchedulerState

A, B, C = b"a" * 20, b"b" * 20, b"c" * 20
PG = "01" * 16


def tid(i: int) -> bytes:
    return bytes([i]) * 20


def dispatched(decisions: list) -> list[bytes]:
    return [d.task_id for d in decisions if d[0] == "dispatch"]


def test_a_restarted_actor_holds_its_moved_bundle_and_a_task_queued_there_waits() -> None:
    groups = GcsGroups(FakeKv().put, FakeKv().items)
    nodes = [node(A, 1), node(B, 1)]
    create(groups, PG, nodes)  # STRICT_SPREAD, two bundles of 1 CPU
    ledgers = {A: BundleLedger({"CPU": 1.0}), B: BundleLedger({"CPU": 1.0})}
    sync_until_quiet(groups, ledgers, nodes)
    placed = groups.call({"op": "get", "pg_id": PG}, nodes)["bundles_to_node_id"]
    lost = next(i for i, n in placed.items() if n == B.hex())

    # B dies; C (1 CPU, "x") replaces it and the lost bundle is placed there.
    groups.node_dead(B)
    nodes = [node(A, 1), node(B, 1, alive=False), node(C, 1)]
    ledgers = {A: ledgers[A], C: BundleLedger({"CPU": 1.0, "x": 2.0})}
    sync_until_quiet(groups, ledgers, nodes)
    info = groups.call({"op": "get", "pg_id": PG}, nodes)
    assert info["state"] == "CREATED" and info["bundles_to_node_id"][lost] == C.hex()

    # C's scheduler: the restarted actor's creation (same demand as the first one).
    ref = GroupRef(bytes.fromhex(PG), ({"CPU": 1.0},) * 2, "STRICT_SPREAD", lost)
    demand = bundle_demand({"CPU": 1.0}, ref)
    c = SchedulerState(ledgers[C].totals())
    c.add_worker(1)
    c.add_worker(2)
    c.submit(tid(1), demand, actor_id=tid(9), actor_creation=True)
    assert dispatched(c.decisions()) == [tid(1)]
    c.task_finished(1, tid(1))  # created: the actor keeps the bundle's CPU
    c.submit(tid(2), demand)  # a task queued in the same bundle waits
    assert dispatched(c.decisions()) == []
    c.set_total(ledgers[C].totals())  # totals set again (another order): still held
    assert dispatched(c.decisions()) == []

    # Removal: C releases the bundle first, then the actor dies: the task cannot start.
    groups.call({"op": "remove", "pg_id": PG}, nodes)
    sync_until_quiet(groups, ledgers, nodes)
    assert ledgers[C].held == {}
    c.set_total(ledgers[C].totals())
    c.remove_worker(1)
    assert dispatched(c.decisions()) == []
    assert [t for t, _, _ in c.snapshot()["infeasible"]] == [tid(2)]
