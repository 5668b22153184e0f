"""The GCS's placement group table and a node's bundle ledger, without processes."""

from __future__ import annotations

from typing import Any

import pytest

from rayfield._private.gcs.groups import KV_NAMESPACE, GcsGroups
from rayfield._private.node_manager.bundles import BundleLedger
from rayfield._private.protocol.errors import GcsAlreadyExistsError, GcsInvalidRequestError
from rayfield._private.protocol.types import NodeInfo, ResourceDemand

A, B = b"a" * 20, b"b" * 20


class FakeKv:
    def __init__(self) -> None:
        self.data: dict[tuple[str, bytes], bytes] = {}

    def put(self, ns: str, key: bytes, value: bytes) -> None:
        self.data[(ns, key)] = value

    def items(self, ns: str) -> list[tuple[bytes, bytes]]:
        return [(k, v) for (n, k), v in self.data.items() if n == ns]

    def delete(self, ns: str, key: bytes) -> None:
        self.data.pop((ns, key), None)


def node(node_id: bytes, cpus: float, alive: bool = True, **kw: Any) -> NodeInfo:
    return NodeInfo(
        node_id=node_id,
        address="x",
        socket_path="",
        session_dir="",
        hostname="",
        resources_total={"CPU": cpus},
        resources_available={"CPU": cpus},
        alive=alive,
        **kw,
    )


def create(groups: GcsGroups, pg: str, nodes: list, strategy: str = "STRICT_SPREAD", **kw: Any):
    return groups.call(
        {"op": "create", "pg_id": pg, "strategy": strategy, "bundles": [{"CPU": 1}] * 2, **kw},
        nodes,
    )


def sync_until_quiet(groups: GcsGroups, ledgers: dict[bytes, BundleLedger], nodes: list) -> None:
    """Each node syncs (answers to its prepares go out the next time) until no orders."""
    answers: dict[bytes, list] = {n: [] for n in ledgers}
    for _ in range(5):
        busy = False
        for nid, ledger in ledgers.items():
            reply = groups.sync(nid, answers[nid], ledger.report(), nodes)
            answers[nid] = []
            for order in reply["orders"]:
                busy = True
                pg = bytes.fromhex(order["pg"])
                if order["op"] == "prepare":
                    bundles = {int(i): b for i, b in order["bundles"].items()}
                    ok = ledger.prepare(pg, bundles, {"CPU": 8.0})
                    answers[nid].append({"pg": order["pg"], "indices": list(bundles), "ok": ok})
                elif order["op"] == "commit":
                    ledger.commit(pg, order["indices"])
                else:
                    ledger.release(pg, order["indices"])
        if not busy:
            return


def test_create_sync_commit_persist_and_restore() -> None:
    kv = FakeKv()
    groups = GcsGroups(kv.put, kv.items)
    nodes = [node(A, 2), node(B, 2)]
    create(groups, "01", nodes, name="g")
    ledgers = {A: BundleLedger({"CPU": 2.0}), B: BundleLedger({"CPU": 2.0})}
    sync_until_quiet(groups, ledgers, nodes)
    info = groups.call({"op": "get", "name": "g"}, nodes)
    assert info["state"] == "CREATED" and set(info["bundles_to_node_id"].values()) == {
        A.hex(),
        B.hex(),
    }
    assert ledgers[A].totals()["CPU"] == 1.0 and ledgers[A].totals()["CPU_group_01"] == 1.0
    # GetNodes shows each node's totals with its bundle
    shown = {n.node_id: n.resources_total for n in groups.overlay(nodes)}
    assert shown[A]["CPU"] == 1.0 and "CPU_group_01" in shown[A]
    # a GCS restarted on the same records knows the group
    again = GcsGroups(kv.put, kv.items)
    assert again.call({"op": "get", "pg_id": "01"}, nodes)["state"] == "CREATED"
    assert (KV_NAMESPACE, b"\x01") in kv.data
    with pytest.raises(GcsAlreadyExistsError, match="named 'g' exists"):
        create(again, "02", nodes, name="g")


def test_a_node_holding_what_the_table_does_not_give_it_is_told_to_release() -> None:
    groups = GcsGroups(FakeKv().put, FakeKv().items)
    stray = [{"pg": "0f", "index": 0, "committed": True}]
    reply = groups.sync(A, [], stray, [node(A, 2)])
    assert reply["orders"] == [{"op": "release", "pg": "0f", "indices": [0]}]


def test_removal_releases_bundles_and_is_news_for_every_node() -> None:
    groups = GcsGroups(FakeKv().put, FakeKv().items)
    nodes = [node(A, 2), node(B, 2)]
    create(groups, "01", nodes)
    ledgers = {A: BundleLedger({"CPU": 2.0}), B: BundleLedger({"CPU": 2.0})}
    sync_until_quiet(groups, ledgers, nodes)
    groups.call({"op": "add_actor", "pg_id": "01", "actor_id": "aa"}, nodes)
    assert groups.call({"op": "remove", "pg_id": "01"}, nodes) == ["aa"]
    sync_until_quiet(groups, ledgers, nodes)
    assert ledgers[A].held == {} and ledgers[B].held == {}
    assert groups.sync(A, [], [], nodes)["removed"] == ["01"]


def test_node_death_reschedules_and_job_end_removes() -> None:
    groups = GcsGroups(FakeKv().put, FakeKv().items)
    nodes = [node(A, 2), node(B, 2)]
    create(groups, "01", nodes, strategy="PACK", job_id=A[:12].hex())
    ledgers = {A: BundleLedger({"CPU": 2.0})}
    sync_until_quiet(groups, ledgers, nodes)
    assert set(groups.call({"op": "get", "pg_id": "01"}, nodes)["bundles_to_node_id"].values()) == {
        A.hex()
    }
    groups.node_dead(A)
    dead = [node(A, 2, alive=False), node(B, 2)]
    assert groups.call({"op": "get", "pg_id": "01"}, dead)["state"] == "RESCHEDULING"
    sync_until_quiet(groups, {B: BundleLedger({"CPU": 2.0})}, dead)
    assert groups.call({"op": "get", "pg_id": "01"}, dead)["state"] == "CREATED"
    groups.job_finished(A[:12])
    assert groups.call({"op": "get", "pg_id": "01"}, dead)["state"] == "REMOVED"


def test_pending_groups_are_demand_and_group_task_demand_is_not() -> None:
    groups = GcsGroups(FakeKv().put, FakeKv().items)
    in_group = ResourceDemand({f"CPU_group_{'01' * 16}": 1.0}, 1, True)
    task_demand = [in_group, ResourceDemand({"GPU": 1})]
    nodes = [node(A, 1, demand=task_demand)]
    groups.call(
        {"op": "create", "pg_id": "02", "strategy": "STRICT_PACK", "bundles": [{"CPU": 1}] * 2},
        nodes,
    )
    [shown] = groups.overlay(nodes)
    assert [d.shape for d in shown.demand] == [{"GPU": 1}, {"CPU": 2.0}]


@pytest.mark.parametrize(
    "req", [{"op": "nope"}, {"op": "create", "pg_id": "zz"}, {"op": "create", "pg_id": "01"}]
)
def test_bad_requests_are_refused(req: dict) -> None:
    groups = GcsGroups(FakeKv().put, FakeKv().items)
    with pytest.raises(GcsInvalidRequestError):
        groups.call(req, [])


def test_a_ledger_refuses_what_does_not_fit_and_sums_group_wide_resources() -> None:
    ledger = BundleLedger({"CPU": 4.0, "GPU": 1.0})
    assert not ledger.prepare(b"\x01", {0: {"CPU": 3.0}, 1: {"CPU": 2.0}}, {"CPU": 4.0})
    assert ledger.held == {}
    assert ledger.prepare(b"\x01", {0: {"CPU": 1.0}, 1: {"CPU": 2.0}}, {"CPU": 4.0})
    assert ledger.totals() == {"CPU": 1.0, "GPU": 1.0}  # prepared: reserved, not usable
    ledger.commit(b"\x01", [0, 1])
    totals = ledger.totals()
    assert totals["CPU_group_01"] == 3.0 and totals["CPU_group_1_01"] == 2.0
    assert totals["bundle_group_01"] == 2000.0
    ledger.release(b"\x01", [0, 1])
    assert ledger.totals() == {"CPU": 4.0, "GPU": 1.0}


def test_only_the_latest_removed_groups_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from rayfield._private.gcs import groups as gcs_groups

    monkeypatch.setattr(gcs_groups, "MAX_REMOVED", 2)
    kv = FakeKv()
    groups = GcsGroups(kv.put, kv.items, kv.delete)
    for pg in ("01", "02", "03"):
        create(groups, pg, [], strategy="PACK")
        groups.call({"op": "remove", "pg_id": pg}, [])
    create(groups, "04", [], strategy="PACK")
    assert [i["placement_group_id"] for i in groups.call({"op": "list"}, [])] == ["02", "03", "04"]
    assert sorted(k for _, k in kv.data) == [b"\x02", b"\x03", b"\x04"]
