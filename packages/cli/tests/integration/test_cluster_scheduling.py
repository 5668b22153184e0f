"""Scheduling strategies and ``wait(fetch_local=False)`` on a two-node cluster started by
the CLI (the second node has 4 of resource "b")."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import rayfield as rf
from rayfield.exceptions import ActorUnschedulableError, TaskUnschedulableError
from rayfield.testing import wait_for
from rayfield.util import state
from rayfield.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@rf.remote
def node_of() -> str:
    return str(rf.get_runtime_context().get_node_id())


@rf.remote
def block(size: int) -> np.ndarray:
    return np.ones(size)


@rf.remote
class Where:
    def node(self) -> str:
        return str(rf.get_runtime_context().get_node_id())

    def pid(self) -> int:
        return os.getpid()


@pytest.fixture(scope="module")
def node_ids(driver_cluster: tuple[str, Path]) -> tuple[str, str]:
    """(the driver's node, the other node), as hex ids."""
    mine = str(rf.get_runtime_context().get_node_id())
    [other] = [n["NodeID"] for n in rf.nodes() if n["Alive"] and n["NodeID"] != mine]

    def placed_there() -> bool:
        # The driver's node learns of its peers from its heartbeat's node list, which can
        # trail the GCS: until then a hard affinity to the other node fails as unknown.
        strategy = NodeAffinitySchedulingStrategy(other, soft=False)
        try:
            return rf.get(node_of.options(scheduling_strategy=strategy).remote()) == other
        except TaskUnschedulableError:
            return False

    wait_for(placed_there, timeout=30, message="the driver's node knows the other node")
    return mine, other


def pinned(node_id: str, soft: bool = False) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id, soft=soft)


def test_four_spread_actors_land_on_both_nodes(node_ids: tuple[str, str]) -> None:
    actors = [Where.options(scheduling_strategy="SPREAD").remote() for _ in range(4)]
    where = Counter(rf.get([a.node.remote() for a in actors], timeout=60))
    assert where == {node_ids[0]: 2, node_ids[1]: 2}
    for a in actors:
        rf.kill(a)


def test_node_affinity_pins_tasks_and_actors_to_the_named_node(
    node_ids: tuple[str, str],
) -> None:
    for node_id in node_ids:
        refs = [node_of.options(scheduling_strategy=pinned(node_id)).remote() for _ in range(3)]
        assert rf.get(refs, timeout=60) == [node_id] * 3
        actor = Where.options(scheduling_strategy=pinned(node_id)).remote()
        assert rf.get(actor.node.remote(), timeout=60) == node_id
        rf.kill(actor)
    soft = node_of.options(scheduling_strategy=pinned("ab" * 20, soft=True)).remote()
    assert rf.get(soft, timeout=60) in node_ids  # an unknown node: placed as by default


def test_hard_affinity_to_an_unknown_node_fails_with_a_clear_error(
    node_ids: tuple[str, str],
) -> None:
    gone = "ab" * 20
    with pytest.raises(TaskUnschedulableError, match=f"node {gone} is dead or unknown"):
        rf.get(node_of.options(scheduling_strategy=pinned(gone)).remote(), timeout=60)
    actor = Where.options(scheduling_strategy=pinned(gone)).remote()
    with pytest.raises(ActorUnschedulableError, match="dead or unknown"):
        rf.get(actor.pid.remote(), timeout=60)


def stored_on(ref: rf.ObjectRef[object]) -> set[str]:
    """The nodes whose stores hold ``ref``'s object (the cluster state API)."""
    return {o["node_id"] for o in state.list_objects() if o["object_id"] == ref.hex()}


def test_wait_without_fetch_local_leaves_the_object_where_it_was_made(
    node_ids: tuple[str, str],
) -> None:
    mine, other = node_ids
    remote_made = pinned(other)
    ref = block.options(scheduling_strategy=remote_made).remote(500_000)  # 4 MB
    ready, not_ready = rf.wait([ref], fetch_local=False, timeout=60)
    assert ready == [ref] and not_ready == []
    assert stored_on(ref) == {other}  # ready (made there), not fetched here

    fetched = block.options(scheduling_strategy=remote_made).remote(500_000)
    ready, _ = rf.wait([fetched], timeout=60)  # the default: fetch_local=True
    assert ready == [fetched]
    assert mine in stored_on(fetched)
    assert rf.get(ref, timeout=60).sum() == 500_000  # a get fetches it as usual
