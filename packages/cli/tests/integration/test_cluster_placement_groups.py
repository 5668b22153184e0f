"""Placement groups on real clusters of `rayfield start` nodes (the GCS owns the table)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from clusterutil import add_node, start_nodes, stop_in_background

import rayfield as rf
from rayfield.exceptions import ActorDiedError, TaskCancelledError, WorkerCrashedError
from rayfield.testing import wait_for
from rayfield.util import (
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from rayfield.util.cluster import rayfield_processes
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from rayfield.util.state import list_nodes


@rf.remote(num_cpus=1)
def node_of_task() -> str:
    return rf.get_runtime_context().get_node_id()


@rf.remote(num_cpus=0, num_gpus=1)
def gpu_ids() -> tuple[str, list]:
    import os

    return os.environ["CUDA_VISIBLE_DEVICES"], rf.get_gpu_ids()


@rf.remote(num_cpus=1, max_retries=3)
def run_until_killed(flag: str) -> str:
    """Says it runs (``flag`` is written), then runs until its worker is killed."""
    import pathlib
    import time

    pathlib.Path(flag).write_text("running")
    time.sleep(600)
    return "finished"


@rf.remote(num_cpus=1, max_restarts=1, max_task_retries=-1)
class Member:
    def node(self) -> str:
        return rf.get_runtime_context().get_node_id()


def gcs_nodes() -> list:
    from rayfield._private import context
    from rayfield._private.driver import names

    return names.client(context.gcs_address()).get_nodes()


def test_strict_spread_and_a_node_killed_under_the_group(tmp_path: Path) -> None:
    address = start_nodes(tmp_path, "--heartbeat-timeout-s", "1.5")
    rf.init(address=address, temp_dir=str(tmp_path))
    try:
        pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
        assert pg.wait(30)
        placed = placement_group_table(pg)["bundles_to_node_id"]
        assert len(set(placed.values())) == 2  # one bundle a node
        # both CPUs reserved (free resources reach the GCS with each node's heartbeat)
        wait_for(
            lambda: rf.available_resources().get("CPU", 0.0) == 0.0,
            20,
            "CPUs reserved",
            interval=0.2,
        )
        for i in (0, 1):  # work in a bundle runs on its node
            in_bundle = node_of_task.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)
            )
            assert rf.get(in_bundle.remote(), timeout=60) == placed[i]

        # A STRICT_PACK of 2 CPUs fits no 1-CPU node: PENDING, and shown as demand.
        big = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
        assert not big.wait(0.5)
        assert placement_group_table(big)["state"] == "PENDING"
        shapes = [d.shape for n in gcs_nodes() for d in n.demand]
        assert {"CPU": 2.0} in shapes
        remove_placement_group(big)

        # Kill the node of the bundle that is not on the driver's node.
        mine = rf.get_runtime_context().get_node_id()
        [lost] = [i for i, n in placed.items() if n != mine]
        actor = Member.options(placement_group=pg, placement_group_bundle_index=lost).remote()
        assert rf.get(actor.node.remote(), timeout=60) == placed[lost]
        nodes = [p for p in rayfield_processes(tmp_path) if "node_main" in " ".join(p.cmdline())]
        [victim] = [p for p in nodes if _node_id_of(p, tmp_path) == placed[lost]]
        for p in [victim, *victim.children(recursive=True)]:
            p.send_signal(signal.SIGKILL)
        wait_for(
            lambda: placement_group_table(pg)["state"] == "RESCHEDULING",
            30,
            "RESCHEDULING",
            interval=0.2,
        )
        add_node(address, tmp_path, '{"x": 2}')  # the replacement
        wait_for(
            lambda: placement_group_table(pg)["state"] == "CREATED",
            60,
            "CREATED again",
            interval=0.2,
        )
        moved = placement_group_table(pg)["bundles_to_node_id"][lost]
        assert moved not in (placed[0], placed[1])
        assert rf.get(actor.node.remote(), timeout=90) == moved  # the actor restarted there

        # The restarted actor holds its bundle's CPU on the new node: a task queued in
        # that bundle waits there. A task runs in the other bundle.
        waiting = node_of_task.options(placement_group=pg, placement_group_bundle_index=lost)
        waiting = waiting.remote()
        wait_for(lambda: _queued_on(moved) == 1, 60, "the task queued on the new node")
        flag = tmp_path / "running"
        other = run_until_killed.options(placement_group=pg, placement_group_bundle_index=1 - lost)
        running = other.remote(str(flag))
        wait_for(flag.exists, 60, "the task in the other bundle runs", interval=0.2)

        # Removal, on every node: the actors are killed, the running task is killed (not
        # retried) and the queued one cancelled; it never starts in the CPU the actor
        # frees (the nodes release the bundles before the actor is killed).
        remove_placement_group(pg)
        with pytest.raises(ActorDiedError):
            rf.get(actor.node.remote(), timeout=60)
        with pytest.raises(TaskCancelledError):
            rf.get(waiting, timeout=60)
        with pytest.raises(WorkerCrashedError, match="placement group removed"):
            rf.get(running, timeout=60)
        wait_for(lambda: rf.available_resources().get("CPU") == 2.0, 30, "CPUs back", interval=0.2)

        # A bundle's GPU on a node of 2 (declared) GPUs: its work sees the bundle's device.
        add_node(address, tmp_path, '{"y": 1}', "--num-gpus", "2")
        gpus = placement_group([{"GPU": 1}])
        assert gpus.wait(60)
        in_gpu_bundle = gpu_ids.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(gpus, 0)
        )
        assert rf.get(in_gpu_bundle.remote(), timeout=60) == ("1", [1])
        assert rf.get(gpu_ids.remote(), timeout=60) == ("0", [0])  # plain work: the other one
        remove_placement_group(gpus)

        # A detached group outlives its driver; the others end with their job.
        kept = placement_group([{"x": 1}], name="kept", lifetime="detached")
        ended = placement_group([{"x": 1}], name="ended")
        assert kept.wait(30) and ended.wait(30)
        rf.shutdown()
        rf.init(address=address, temp_dir=str(tmp_path))
        assert placement_group_table(kept)["state"] == "CREATED"
        assert placement_group_table(ended)["state"] == "REMOVED"
        assert get_placement_group("kept") == kept
        remove_placement_group(kept)
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)


def _queued_on(node_id: str) -> int:
    """How many tasks wait for resources on that node now (it is asked)."""
    [row] = [n for n in list_nodes() if n["node_id"] == node_id]
    return int(row.get("tasks_queued", -1))


def _node_id_of(proc: object, temp_dir: Path) -> str | None:
    """The node id a node_main process serves, from its session's node.json."""
    for session in temp_dir.glob("session_*"):
        info = session / "node.json"
        if info.exists():
            data = json.loads(info.read_text())
            if data.get("pid") == proc.pid:  # type: ignore[attr-defined]
                return data.get("node_id")
    return None
