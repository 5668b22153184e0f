"""Placement groups on rayfield.init()'s own node (real worker processes).

Two-node placement (STRICT_SPREAD across nodes, a node killed under a group) is tested
with real ``rayfield start`` clusters in packages/cli/tests/test_cluster_placement_groups.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle
import pytest

import rayfield as rf
from rayfield.exceptions import RayfieldError, TaskCancelledError, WorkerCrashedError
from rayfield.testing import wait_for
from rayfield.util import (
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.rayfield_runtime(num_cpus=4)


@pytest.fixture
def rt(rayfield_module_runtime: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The module's runtime; every group a test made is removed after it."""
    yield rayfield_module_runtime
    for info in placement_group_table().values():
        if info["state"] != "REMOVED":
            remove_placement_group(get_placement_group_by_id(info["placement_group_id"]))
    wait_for(lambda: rf.available_resources().get("CPU") == 4.0, message="CPUs back")


def get_placement_group_by_id(pg_hex: str) -> Any:
    from rayfield.util.placement_group import PlacementGroup

    info = placement_group_table()[pg_hex]
    return PlacementGroup(bytes.fromhex(pg_hex), list(info["bundles"].values()), info["strategy"])


@rf.remote(num_cpus=1)
def where() -> tuple[str | None, int]:
    pg = get_current_placement_group()
    return (pg.id.hex() if pg else None), (pg.bundle_count if pg else 0)


@rf.remote(num_cpus=1)
class Member:
    def group(self) -> str | None:
        pg = get_current_placement_group()
        return pg.id.hex() if pg else None

    def child_group(self) -> Any:
        return rf.get(where.remote())

    def thread_groups(self) -> Any:
        """What a thread this actor starts sees: its group, and its child task's."""
        import threading

        out: list[Any] = []
        thread = threading.Thread(target=lambda: out.extend([self.group(), self.child_group()]))
        thread.start()
        thread.join()
        return out


def test_a_group_reserves_and_work_in_its_bundles_sees_it(rt: Any) -> None:
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK", name="pair")
    assert pg.wait(30)
    assert pg.bundle_count == 2 and pg.bundle_specs == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert rf.available_resources()["CPU"] == 2.0  # the reservation left the free CPUs
    assert rf.cluster_resources()["CPU"] == 4.0  # as in Ray: reserved is in use, not gone
    assert rf.cluster_resources()[f"CPU_group_{pg.id.hex()}"] == 2.0
    info = placement_group_table(pg)
    assert info["state"] == "CREATED" and info["name"] == "pair"
    assert set(info["bundles_to_node_id"]) == {0, 1}
    in_bundle = where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 1))
    assert rf.get(in_bundle.remote()) == (pg.id.hex(), 2)
    actor = Member.options(placement_group=pg, placement_group_bundle_index=0).remote()
    assert rf.get(actor.group.remote()) == pg.id.hex()
    assert rf.get(where.remote()) == (None, 0)  # outside the group
    assert get_placement_group("pair") == pg
    assert get_current_placement_group() is None  # the driver is in no group


def test_capture_child_tasks_puts_children_in_the_group(rt: Any) -> None:
    pg = placement_group([{"CPU": 2}])
    strategy = PlacementGroupSchedulingStrategy(pg, 0, placement_group_capture_child_tasks=True)
    actor = Member.options(scheduling_strategy=strategy, num_cpus=1).remote()
    assert rf.get(actor.child_group.remote(), timeout=30) == (pg.id.hex(), 1)
    # A thread of the actor is in the group too (a Tune function trainable's thread).
    assert rf.get(actor.thread_groups.remote(), timeout=30) == [pg.id.hex(), (pg.id.hex(), 1)]
    plain = Member.options(placement_group=pg).remote()  # no capture: children run outside
    assert rf.get(plain.child_group.remote(), timeout=30) == (None, 0)


def test_a_group_that_does_not_fit_waits_until_another_is_removed(rt: Any) -> None:
    first = placement_group([{"CPU": 3}])
    assert first.wait(30)
    second = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    assert not second.wait(0.5)
    assert placement_group_table(second)["state"] == "PENDING"
    remove_placement_group(first)
    assert placement_group_table(first)["state"] == "REMOVED"
    assert second.wait(30)


def test_removing_a_group_kills_its_actors_and_cancels_its_queued_tasks(rt: Any) -> None:
    pg = placement_group([{"CPU": 1}])
    assert pg.wait(30)
    actor = Member.options(placement_group=pg, placement_group_bundle_index=0).remote()
    assert rf.get(actor.group.remote()) == pg.id.hex()
    queued = where.options(placement_group=pg).remote()  # waits: the actor holds the CPU
    remove_placement_group(pg)
    with pytest.raises(rf.exceptions.ActorDiedError):
        rf.get(actor.group.remote(), timeout=30)
    with pytest.raises(TaskCancelledError):
        rf.get(queued, timeout=30)
    remove_placement_group(pg)  # twice: nothing


@rf.remote(num_cpus=1, max_retries=3)
def run_until_killed(flag: str) -> str:
    """Says it runs (``flag`` is written), then runs until its worker is killed."""
    import pathlib
    import time

    pathlib.Path(flag).write_text("running")
    time.sleep(600)
    return "finished"


@rf.remote(num_cpus=0)
def make_member(pg: Any) -> Any:
    """An actor in ``pg``, created by a worker (not the driver that holds the table)."""
    return [Member.options(placement_group=pg, placement_group_bundle_index=1).remote()]


def test_removing_a_group_kills_its_running_tasks_and_workers_actors(
    rt: Any, tmp_path: Any
) -> None:
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    assert pg.wait(30)
    flag = tmp_path / "running"
    running = run_until_killed.options(placement_group=pg, placement_group_bundle_index=0)
    ref = running.remote(str(flag))
    [member] = rf.get(make_member.remote(pg), timeout=30)
    assert rf.get(member.group.remote(), timeout=30) == pg.id.hex()
    wait_for(flag.exists, 30, "the task in the group runs")
    remove_placement_group(pg)
    # As Ray: the running task's worker is killed and the task is not retried.
    with pytest.raises(WorkerCrashedError, match="placement group removed"):
        rf.get(ref, timeout=30)
    with pytest.raises(rf.exceptions.ActorDiedError):
        rf.get(member.group.remote(), timeout=30)


def test_bad_arguments_get_clear_errors(rt: Any) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        placement_group([])
    with pytest.raises(ValueError, match="reserves nothing"):
        placement_group([{"CPU": 0}])
    with pytest.raises(ValueError, match="from 0 to"):
        placement_group([{"CPU": -1}])
    with pytest.raises(ValueError, match="strategy must be one of"):
        placement_group([{"CPU": 1}], strategy="SCATTER")
    pg = placement_group([{"CPU": 1}], name="taken")
    with pytest.raises(ValueError, match="named 'taken' exists"):
        placement_group([{"CPU": 1}], name="taken")
    with pytest.raises(ValueError, match="out of range: the group has 1"):
        where.options(placement_group=pg, placement_group_bundle_index=1)
    with pytest.raises(ValueError, match=r"can never fit in bundle 0 .*CPU"):
        where.options(num_cpus=2, placement_group=pg, placement_group_bundle_index=0).remote()
    with pytest.raises(TypeError, match="must be a placement group"):
        PlacementGroupSchedulingStrategy("pg")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no placement group named"):
        get_placement_group("nobody")


def test_a_strict_pack_larger_than_the_node_stays_pending(rt: Any) -> None:
    pg = placement_group([{"CPU": 3}, {"CPU": 3}], strategy="STRICT_PACK")
    assert not pg.wait(0.3)
    assert placement_group_table(pg)["state"] == "PENDING"
    assert rf.available_resources()["CPU"] == 4.0  # nothing held for it meanwhile


def test_a_worker_without_a_cluster_cannot_reach_the_table(rt: Any) -> None:
    @rf.remote(num_cpus=0)
    def create() -> str:
        try:
            placement_group([{"CPU": 1}])
        except RayfieldError as exc:
            return str(exc)
        return "created"

    assert "the driver that called rayfield.init() holds it" in rf.get(create.remote())
