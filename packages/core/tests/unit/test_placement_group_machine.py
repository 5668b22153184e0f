"""The placement group table and placement (pure, no processes)."""

from __future__ import annotations

import pytest

from rayfield._private.common import placement_groups as pgs
from rayfield._private.common.pg_machine import (
    Commit,
    Group,
    GroupTable,
    NodeView,
    Prepare,
    Release,
    place,
)

A, B, C = b"a" * 20, b"b" * 20, b"c" * 20


def nodes(*specs: tuple[bytes, float]) -> list[NodeView]:
    return [NodeView(n, {"CPU": cpu}, {"CPU": cpu}) for n, cpu in specs]


def group(pg: bytes, strategy: str, *cpus: float, name: str = "", job: bytes = b"") -> Group:
    return Group(pg, name, strategy, [{"CPU": c} for c in cpus], job_id=job)


def answer_all(table: GroupTable, decisions: list, ok: bool = True) -> list:
    out = []
    for d in decisions:
        assert isinstance(d, Prepare)
        out += table.prepared(d.pg_id, d.node_id, list(d.bundles), ok)
    return out


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("PACK", {0: B, 1: B}),  # B has room for both
        ("STRICT_PACK", {0: B, 1: B}),
        ("SPREAD", {0: B, 1: A}),
        ("STRICT_SPREAD", {0: B, 1: A}),
    ],
)
def test_each_strategy_places_two_bundles_as_it_says(strategy: str, expected: dict) -> None:
    free = {A: {"CPU": 2.0}, B: {"CPU": 4.0}}
    assert place(strategy, {0: {"CPU": 1}, 1: {"CPU": 1}}, free) == expected


def test_strict_strategies_never_bend_and_best_effort_ones_do() -> None:
    free = {A: {"CPU": 1.0}, B: {"CPU": 1.0}}
    two = {0: {"CPU": 1.0}, 1: {"CPU": 1.0}}
    assert place("STRICT_PACK", two, free) is None  # no node holds both
    assert place("PACK", two, free) == {0: A, 1: B}  # PACK spreads when it must
    three = {0: {"CPU": 0.5}, 1: {"CPU": 0.5}, 2: {"CPU": 0.5}}
    assert place("STRICT_SPREAD", three, free) is None  # 3 bundles, 2 nodes
    assert sorted(place("SPREAD", three, free).values()) == [A, A, B]  # type: ignore[union-attr]


def test_strict_spread_after_a_death_avoids_the_nodes_the_group_still_uses() -> None:
    free = {A: {"CPU": 4.0}, C: {"CPU": 1.0}}
    assert place("STRICT_SPREAD", {1: {"CPU": 1.0}}, free, used=[A]) == {1: C}
    assert place("STRICT_SPREAD", {1: {"CPU": 1.0}}, {A: {"CPU": 4.0}}, used=[A]) is None


def test_a_group_is_prepared_then_committed_and_created() -> None:
    table = GroupTable()
    table.add(group(b"g1", "STRICT_SPREAD", 1, 1))
    prepares = table.schedule(nodes((A, 2), (B, 2)))
    assert {p.node_id for p in prepares} == {A, B}
    assert table.groups[b"g1"].state == pgs.PENDING
    assert table.schedule(nodes((A, 2), (B, 2))) == []  # a prepare is in flight
    first = table.prepared(b"g1", prepares[0].node_id, list(prepares[0].bundles), True)
    assert first == []  # waits for the other node
    commits = answer_all(table, prepares[1:])
    expected = [Commit(p.node_id, b"g1", tuple(p.bundles)) for p in prepares]
    assert sorted(commits, key=lambda c: c.node_id) == sorted(expected, key=lambda c: c.node_id)
    g = table.groups[b"g1"]
    assert g.state == pgs.CREATED and set(g.nodes) == {A, B}


def test_a_refused_prepare_releases_the_other_nodes_and_is_tried_again() -> None:
    table = GroupTable()
    table.add(group(b"g1", "SPREAD", 1, 1))
    prepares = table.schedule(nodes((A, 1), (B, 1)))
    on_a = next(p for p in prepares if p.node_id == A)
    on_b = next(p for p in prepares if p.node_id == B)
    assert table.prepared(b"g1", A, list(on_a.bundles), True) == []
    assert table.prepared(b"g1", B, list(on_b.bundles), False) == [
        Release(A, b"g1", tuple(on_a.bundles))
    ]
    assert table.groups[b"g1"].state == pgs.PENDING
    assert table.schedule(nodes((A, 1), (B, 1)))  # tried again on the next pass
    # a late yes for the aborted prepare is released at once
    assert table.prepared(b"g9", A, [0], True) == [Release(A, b"g9", (0,))]


def test_a_group_that_does_not_fit_stays_pending_and_is_reported_as_demand() -> None:
    table = GroupTable()
    table.add(group(b"big", "STRICT_PACK", 2, 2, 2))
    table.add(group(b"small", "PACK", 1))
    prepares = table.schedule(nodes((A, 4)))
    assert [p.pg_id for p in prepares] == [b"small"]  # the big one does not block it
    assert table.groups[b"big"].state == pgs.PENDING
    assert table.pending_demand() == [{"CPU": 6.0}]  # STRICT_PACK: one summed shape
    table.add(group(b"spread", "SPREAD", 3, 3))
    assert table.schedule(nodes((A, 1))) == []
    assert table.pending_demand() == [{"CPU": 6.0}, {"CPU": 3.0}, {"CPU": 3.0}]


def test_one_pass_does_not_give_the_same_free_cpu_to_two_groups() -> None:
    table = GroupTable()
    table.add(group(b"g1", "PACK", 1))
    table.add(group(b"g2", "PACK", 1))
    prepares = table.schedule(nodes((A, 1)))
    assert [p.pg_id for p in prepares] == [b"g1"]


def test_node_death_reschedules_its_bundles_on_another_node() -> None:
    table = GroupTable()
    table.add(group(b"g1", "STRICT_SPREAD", 1, 1))
    answer_all(table, table.schedule(nodes((A, 1), (B, 1))))
    g = table.groups[b"g1"]
    lost = g.nodes.index(B)
    assert table.node_dead(B) == []
    assert g.state == pgs.RESCHEDULING and g.nodes[lost] is None
    assert table.pending_demand() == [{"CPU": 1.0}]
    view = [*nodes((A, 0), (C, 1)), NodeView(B, {"CPU": 1}, {"CPU": 1}, alive=False)]
    prepares = table.schedule(view)
    assert prepares == [Prepare(C, b"g1", {lost: {"CPU": 1.0}})]
    assert answer_all(table, prepares) == [Commit(C, b"g1", (lost,))]
    assert g.state == pgs.CREATED and set(g.nodes) == {A, C}


def test_death_of_a_node_during_prepare_releases_the_others() -> None:
    table = GroupTable()
    table.add(group(b"g1", "STRICT_SPREAD", 1, 1))
    prepares = table.schedule(nodes((A, 1), (B, 1)))
    on_a = next(p for p in prepares if p.node_id == A)
    table.prepared(b"g1", A, list(on_a.bundles), True)
    assert table.node_dead(B) == [Release(A, b"g1", tuple(on_a.bundles))]
    assert table.groups[b"g1"].state == pgs.PENDING and not table.groups[b"g1"].preparing


def test_remove_releases_every_node_and_job_end_removes_only_non_detached() -> None:
    table = GroupTable()
    table.add(group(b"g1", "SPREAD", 1, 1, job=b"j"))
    detached = group(b"g2", "PACK", 1, job=b"j")
    detached.detached = True
    table.add(detached)
    answer_all(table, table.schedule(nodes((A, 2), (B, 2))))
    released = table.job_finished(b"j")
    assert sorted(r.node_id for r in released) == [A, B]
    assert all(isinstance(r, Release) and r.pg_id == b"g1" for r in released)
    assert table.groups[b"g1"].state == pgs.REMOVED
    assert table.groups[b"g1"].nodes == [None, None]  # a removed group holds nothing
    assert table.groups[b"g2"].state == pgs.CREATED
    assert table.remove(b"g1") == []  # removing twice does nothing
    with pytest.raises(KeyError):
        table.remove(b"nope")


def test_names_are_unique_among_groups_not_removed() -> None:
    table = GroupTable()
    table.add(group(b"g1", "PACK", 1, name="trainer"))
    with pytest.raises(ValueError, match="named 'trainer' exists"):
        table.add(group(b"g2", "PACK", 1, name="trainer"))
    table.remove(b"g1")
    table.add(group(b"g2", "PACK", 1, name="trainer"))
    assert table.by_name("trainer") is table.groups[b"g2"]


# ---- arguments and renaming --------------------------------------------------------


@pytest.mark.parametrize(
    ("bundles", "error", "match"),
    [
        ([], ValueError, "must not be empty"),
        ({"CPU": 1}, TypeError, "list of resource dicts"),
        ([{"CPU": -1}], ValueError, "from 0 to"),
        ([{"CPU": 0}], ValueError, "reserves nothing"),
        ([{}], ValueError, "reserves nothing"),
        ([{"CPU": 1.5}], ValueError, "must be whole"),
        ([{"CPU": float("nan")}], ValueError, "from 0 to"),
        ([1], TypeError, "must be a dict"),
    ],
)
def test_bad_bundles_get_a_clear_error(bundles: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        pgs.check_bundles(bundles)


def test_bad_strategy_and_lifetime_get_a_clear_error() -> None:
    with pytest.raises(ValueError, match="STRICT_SPREAD"):
        pgs.check_strategy("SPREADS")
    with pytest.raises(ValueError, match="detached"):
        pgs.check_lifetime("forever")
    assert pgs.check_bundles([{"CPU": 1, "GPU": 0}]) == [{"CPU": 1.0}]


def test_work_in_a_bundle_demands_the_renamed_resources() -> None:
    ref = pgs.GroupRef(b"\x01" * 4, ({"CPU": 2.0}, {"CPU": 1.0, "GPU": 1.0}), "PACK", 1)
    assert pgs.bundle_demand({"CPU": 1.0, "GPU": 1.0}, ref) == {
        "CPU_group_1_01010101": 1.0,
        "GPU_group_1_01010101": 1.0,
        "bundle_group_1_01010101": 0.001,
    }
    anywhere = pgs.GroupRef(ref.pg_id, ref.bundles, "PACK", -1)
    assert pgs.bundle_demand({"CPU": 2.0}, anywhere) == {
        "CPU_group_01010101": 2.0,
        "bundle_group_01010101": 0.001,
    }
    with pytest.raises(ValueError, match=r"can never fit in bundle 1 .*ask for less"):
        pgs.bundle_demand({"CPU": 2.0}, ref)
    with pytest.raises(ValueError, match="can never fit in any bundle"):
        pgs.bundle_demand({"CPU": 3.0}, anywhere)
    with pytest.raises(ValueError, match="out of range: the group has 2"):
        pgs.bundle_demand({}, pgs.GroupRef(ref.pg_id, ref.bundles, "PACK", 2))


def test_a_committed_bundle_adds_its_renamed_resources() -> None:
    assert pgs.committed_resources("ab", 0, {"CPU": 1.0}) == {
        "CPU_group_0_ab": 1.0,
        "CPU_group_ab": 1.0,
        "bundle_group_0_ab": pgs.BUNDLE_UNIT,
        "bundle_group_ab": pgs.BUNDLE_UNIT,
    }


def test_reserved_resources_count_back_into_the_plain_totals() -> None:
    pg = "ab" * 16
    totals = {"CPU": 1.0, f"CPU_group_{pg}": 3.0, f"CPU_group_0_{pg}": 3.0, "my_group_x": 1.0}
    totals[f"bundle_group_{pg}"] = 1000.0
    assert pgs.with_reserved(totals)["CPU"] == 4.0
    assert pgs.with_reserved(totals)["my_group_x"] == 1.0  # not a group's name
    assert "bundle" not in pgs.with_reserved(totals)


def test_only_names_made_for_a_group_count_as_group_resources() -> None:
    pg = "cd" * 16
    assert pgs.group_of(f"CPU_group_{pg}") == pg
    assert pgs.group_of(f"CPU_group_3_{pg}") == pg
    assert pgs.group_of(f"my_group_x_group_1_{pg}") == pg
    for plain in ("my_group_x", "CPU", f"CPU_group_x_{pg}", "a_group_b", f"_group_{pg}"):
        assert pgs.group_of(plain) is None and not pgs.is_group_resource(plain)
