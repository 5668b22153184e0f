"""How actors and tasks end on a two-node cluster: names of dead actors are freed, actors
end with the driver that created them (detached ones stay) or with their last handle
anywhere, and a task forwarded to another node can be cancelled.

The tests that leave both nodes up share one cluster (module-scoped ``nodes``), each
starting once it is idle, with a driver (job) of its own; the one that kills a node
starts its own cluster."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from clusterutil import rayfield_cmd, start_nodes, stop_in_background

import rayfield as rf
import rayfield.util.state
from rayfield._private.gcs.client import GcsClient
from rayfield.actor import exit_actor
from rayfield.exceptions import ActorDiedError, TaskCancelledError
from rayfield.testing import wait_for
from rayfield.util.cluster import find_token, rayfield_processes


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A head (1 CPU) and node b (1 CPU, b_res: 2) shared by the module's tests that
    leave both nodes up: (address, temp_dir)."""
    temp_dir = tmp_path_factory.mktemp("rf")
    address = start_nodes(temp_dir, resources='{"b_res": 2}')
    try:
        yield address, temp_dir
    finally:
        stop_in_background(temp_dir)


def idle(address: str, temp_dir: Path) -> None:
    """Wait until every node of the shared cluster is alive, has all of its resources
    free and nothing queued (what an earlier test started has ended)."""
    with GcsClient(address, find_token(address, temp_dir)) as gcs:

        def settled() -> bool:
            alive = [n for n in gcs.get_nodes() if n.alive]
            return len(alive) == 2 and all(
                n.resources_available == n.resources_total and not any(d.count for d in n.demand)
                for n in alive
            )

        wait_for(settled, 30, "both nodes idle (every resource free, nothing queued)", interval=0.2)


@pytest.fixture
def cluster(nodes: tuple[str, Path]) -> Iterator[str]:
    """The shared head and node b, idle; this process is a driver on the head for the
    test (its job ends, and with it its actors and tasks, when the test does)."""
    address, temp_dir = nodes
    idle(address, temp_dir)
    rf.init(address=address, temp_dir=str(temp_dir))
    try:
        yield address
    finally:
        rf.shutdown()


def node_id() -> str:
    return str(rf.get_runtime_context().get_node_id())


@rf.remote(num_cpus=0)
class Named:
    def where(self) -> str:
        return node_id()

    def leave(self) -> None:
        exit_actor()

    def crash(self) -> None:
        os._exit(1)


def name_is_free(name: str) -> bool:
    try:
        rf.get_actor(name)
    except ValueError:
        return True
    return False


def test_a_named_actor_that_dies_on_its_own_frees_its_name(cluster: str) -> None:
    here = node_id()
    # On the other node, ended from inside by exit_actor().
    remote = Named.options(name="on-b", resources={"b_res": 1}).remote()
    assert rf.get(remote.where.remote(), timeout=30) != here
    with pytest.raises(ActorDiedError):
        rf.get(remote.leave.remote(), timeout=30)
    wait_for(
        lambda: name_is_free("on-b"),
        20,
        "the name of an actor that exited to be free",
        interval=0.2,
    )
    again = Named.options(name="on-b", resources={"b_res": 1}).remote()
    assert rf.get(again.where.remote(), timeout=30) != here

    # On this node, its process dying: the name stays while a restart is left.
    local = Named.options(name="local", max_restarts=1).remote()
    assert rf.get(local.where.remote(), timeout=30) == here
    with pytest.raises(ActorDiedError):
        rf.get(local.crash.remote(), timeout=30)
    assert rf.get(rf.get_actor("local").where.remote(), timeout=30) == here  # restarted
    with pytest.raises(ActorDiedError):
        rf.get(local.crash.remote(), timeout=30)
    wait_for(
        lambda: name_is_free("local"),
        20,
        "the name of an actor out of restarts to be free",
        interval=0.2,
    )
    with pytest.raises(ValueError, match="no actor named 'local'"):
        rf.get_actor("local")


def test_a_named_actor_whose_node_dies_frees_its_name(tmp_path: Path) -> None:
    address = start_nodes(
        tmp_path, resources='{"b_res": 2}', head_args=("--heartbeat-timeout-s", "1.5")
    )
    rf.init(address=address, temp_dir=str(tmp_path))
    try:
        actor = Named.options(name="doomed", resources={"b_res": 1}).remote()
        assert rf.get(actor.where.remote(), timeout=30) != node_id()
        [node_b] = [
            p
            for p in rayfield_processes(tmp_path)
            if "rayfield._private.node_manager.node_main" in p.cmdline()
            and "--head" not in p.cmdline()
        ]
        for p in [*node_b.children(recursive=True), node_b]:
            p.send_signal(signal.SIGKILL)
        wait_for(
            lambda: name_is_free("doomed"), 20, "the name of an actor whose node died", interval=0.2
        )
        with pytest.raises(ActorDiedError):
            rf.get(actor.where.remote(), timeout=30)
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)


DRIVER = """
import os, time
import rayfield as rf

rf.init(address={address!r}, temp_dir={temp_dir!r})

@rf.remote(num_cpus=1)
class Hog:
    def pid(self):
        return os.getpid()

@rf.remote(num_cpus=0)
class Keeper:
    def ping(self):
        return "pong"

here = Hog.remote()  # the head's CPU
there = Hog.options(resources={{"b_res": 1}}).remote()  # node b's CPU and one b_res
keeper = Keeper.options(name="keeper", lifetime="detached").remote()
print(rf.get([here.pid.remote(), there.pid.remote(), keeper.ping.remote()], timeout=60),
      flush=True)
time.sleep(600)
"""


def free_and_total(gcs: GcsClient) -> list[tuple[dict[str, float], dict[str, float]]]:
    return [(n.resources_available, n.resources_total) for n in gcs.get_nodes() if n.alive]


def gone(pid: int) -> bool:
    """The process exited (a zombie its node has not reaped yet counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start_driver(script: str) -> tuple[subprocess.Popen[str], str]:
    """Run a driver script in its own process; returns it and the first line it printed
    (after which the test kills it)."""
    driver = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    line = driver.stdout.readline()
    if not line:
        driver.kill()
        raise AssertionError(driver.stderr.read() if driver.stderr else "no output")
    return driver, line


def test_actors_end_with_their_killed_driver_on_every_node(nodes: tuple[str, Path]) -> None:
    address, temp_dir = nodes
    idle(address, temp_dir)
    driver, line = start_driver(DRIVER.format(address=address, temp_dir=str(temp_dir)))
    try:
        here_pid, there_pid, pong = json.loads(line.replace("'", '"'))
        assert pong == "pong"
        with GcsClient(address, find_token(address, temp_dir)) as gcs:
            wait_for(
                lambda: all(free.get("CPU", 0) == 0 for free, _ in free_and_total(gcs)),
                20,
                "both nodes' CPUs held by the driver's actors",
                interval=0.2,
            )
            driver.send_signal(signal.SIGKILL)
            driver.wait(10)
            wait_for(
                lambda: all(free == total for free, total in free_and_total(gcs)),
                10,
                "every node's resources free again",
                interval=0.2,
            )
        wait_for(
            lambda: gone(here_pid) and gone(there_pid),
            20,
            "the actors' processes to exit",
            interval=0.2,
        )
        status = rayfield_cmd("status", "--temp-dir", str(temp_dir)).stdout
        assert "2 node(s) alive" in status
        rf.init(address=address, temp_dir=str(temp_dir))
        try:  # the detached actor outlives its driver
            keeper = rf.get_actor("keeper")
            assert rf.get(keeper.ping.remote(), timeout=30) == "pong"
            rf.kill(keeper)  # the nodes are shared with the module's other tests
            wait_for(
                lambda: name_is_free("keeper"),
                20,
                "the killed keeper's name to be free",
                interval=0.2,
            )
        finally:
            rf.shutdown()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


@rf.remote(resources={"b_res": 1})
def on_b(seconds: float, started: str = "") -> str:
    if started:
        Path(started).touch()
    time.sleep(seconds)
    return node_id()


def queued_on_b() -> int:
    """Tasks waiting for resources on node b (the node with b_res), from its own stats."""
    rows = rayfield.util.state.list_nodes()
    [b] = [n for n in rows if n["alive"] and "b_res" in n["resources_total"]]
    return int(b.get("tasks_queued", 0))


def test_cancel_reaches_a_task_on_the_other_node(cluster: str, tmp_path: Path) -> None:
    started = tmp_path / "started"
    busy = on_b.remote(60, str(started))  # takes node b's only CPU
    wait_for(started.exists, 20, "the long task to start on node b", interval=0.2)
    queued = on_b.remote(0)  # forwarded to node b, waits for its CPU there
    wait_for(
        lambda: queued_on_b() == 1, 20, "the task forwarded and queued on node b", interval=0.2
    )
    rf.cancel(queued)
    with pytest.raises(TaskCancelledError):
        rf.get(queued, timeout=30)
    rf.cancel(busy)  # running: KeyboardInterrupt in the task there, its worker lives on
    with pytest.raises(TaskCancelledError):  # not GetTimeoutError: the 60 s task was cut short
        rf.get(busy, timeout=30)
    started.unlink()
    busy = on_b.remote(60, str(started))
    wait_for(started.exists, 20, "the second long task to start on node b", interval=0.2)
    rf.cancel(busy, force=True)  # its worker is killed
    with pytest.raises(TaskCancelledError):  # within 30 s, so not by the task's end
        rf.get(busy, timeout=30)
    done = on_b.remote(0)
    where = rf.get(done, timeout=30)
    assert where != node_id()
    rf.cancel(done)  # finished: nothing happens
    assert rf.get(done, timeout=30) == where


@rf.remote(num_cpus=1)
def parent_of_b(marker: str, child_id: str) -> None:
    """Submits a task that waits for node b's CPU, then sleeps: on the head (by default;
    its child is forwarded to node b) or on node b (with ``b_res``)."""
    child = on_b.remote(0, marker)  # forwarded to node b; `marker` appears when it runs
    Path(child_id).write_text(child.hex())
    time.sleep(60)


@pytest.mark.parametrize("parent_on", ["head", "b"])
@pytest.mark.parametrize("recursive", [True, False])
def test_recursive_cancel_reaches_the_children_on_the_other_node(
    cluster: str, tmp_path: Path, recursive: bool, parent_on: str
) -> None:
    started, marker, child_id = (tmp_path / n for n in ("started", "marker", "child_id"))
    busy = on_b.remote(60, str(started))  # takes node b's only CPU
    wait_for(started.exists, 20, "the long task to start on node b", interval=0.2)
    if parent_on == "b":  # the cancel (and its `recursive`) goes to node b
        parent = parent_of_b.options(num_cpus=0, resources={"b_res": 0.5}).remote(
            str(marker), str(child_id)
        )
    else:
        parent = parent_of_b.remote(str(marker), str(child_id))
    wait_for(child_id.exists, 20, "the parent to submit its child", interval=0.2)
    child = rf.ObjectRef(bytes.fromhex(child_id.read_text()))
    wait_for(lambda: queued_on_b() == 1, 20, "the child queued on node b", interval=0.2)
    rf.cancel(parent, recursive=recursive)
    with pytest.raises(TaskCancelledError):
        rf.get(parent, timeout=30)
    if recursive and parent_on == "head":  # cancelled on node b after the parent (async)
        with pytest.raises(TaskCancelledError):
            rf.get(child, timeout=30)
    rf.cancel(busy)  # node b's CPU is free again
    with pytest.raises(TaskCancelledError):
        rf.get(busy, timeout=30)
    if recursive:
        assert rf.get(on_b.remote(0), timeout=30) != node_id()  # ran after the child's turn
        assert not marker.exists()
    else:
        wait_for(marker.exists, 20, "the child to run on node b", interval=0.2)


@rf.remote(num_cpus=1)
class Backend:  # on the head: the only node with a free CPU for it
    def __init__(self) -> None:
        self.n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


@rf.remote(num_cpus=0, resources={"b_res": 1})
class Frontend:  # on node b, holding the only handle to Backend once the driver's goes
    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def call(self) -> int:
        return int(rf.get(self.backend.incr.remote()))

    def node(self) -> str:
        return str(rf.get_runtime_context().get_node_id())


def free_now(name: str) -> float:
    gc.collect()
    return float(rf.available_resources().get(name, 0.0))


def test_a_handle_held_on_the_other_node_keeps_the_actor_until_it_goes(cluster: str) -> None:
    head = str(rf.get_runtime_context().get_node_id())
    frontend = Frontend.remote(Backend.remote())
    gc.collect()
    assert rf.get(frontend.node.remote(), timeout=60) != head
    assert [rf.get(frontend.call.remote(), timeout=60) for _ in range(3)] == [1, 2, 3]
    wait_for(
        lambda: free_now("CPU") == 1 and free_now("b_res") == 1,
        20,
        "both actors placed",
        interval=0.2,
    )
    # The head's own handles are gone; Backend lives on through the one on node b.
    assert [rf.get(frontend.call.remote(), timeout=60) for _ in range(3)] == [4, 5, 6]
    assert free_now("CPU") == 1
    del frontend
    wait_for(lambda: free_now("b_res") == 2, 20, "Frontend ended on node b", interval=0.2)
    wait_for(
        lambda: free_now("CPU") == 2,
        20,
        "Backend ended on the head after node b let go",
        interval=0.2,
    )


@rf.remote(num_cpus=0, resources={"b_res": 1})
class Sink:
    def __init__(self) -> None:
        self.n = 0

    def take(self, payload: bytes) -> None:
        self.n += len(payload)

    def count(self) -> int:
        return self.n


def test_results_of_calls_nobody_reads_leave_the_actors_node(cluster: str) -> None:
    """Calls from the head to an actor on node b whose results the driver drops unread
    (fire and forget): once they ran, their results are kept on no node."""
    sink = Sink.remote()
    refs = [sink.take.remote(b"x" * (i % 3)) for i in range(300)]
    ids = {r.hex() for r in refs}
    del refs
    gc.collect()
    assert rf.get(sink.count.remote(), timeout=60) == 300  # all ran, in order

    wait_for(lambda: not kept(cluster, ids), 30, "no node keeping a dropped result", interval=0.3)


def kept(address: str, ids: set[str]) -> list[str]:
    """The objects of ``ids`` (hex) some node of the cluster at ``address`` still holds."""
    return [
        f"{o['object_id'][:8]} on {o['node']}: {o['reason']}"
        for o in rayfield.util.state.list_objects(address)
        if o["object_id"] in ids
    ]


UNREAD_DRIVER = """
import json
import rayfield as rf

rf.init(address={address!r}, temp_dir={temp_dir!r})
sink = rf.get_actor("unread-sink", namespace="unread")
refs = [sink.take.remote(b"x") for _ in range(40)]
assert rf.get(sink.count.remote()) == 40  # calls run in order: every result is made
print(json.dumps([r.hex() for r in refs]), flush=True)
input()
"""


def test_results_a_killed_driver_never_read_leave_every_node(
    cluster: str, nodes: tuple[str, Path]
) -> None:
    """A driver on the head holds the refs of calls to a detached actor on node b, never
    reads them, and is killed: none of their results stays on any node (their owner is
    gone, so nobody can read them)."""
    address, temp_dir = nodes
    sink = Sink.options(name="unread-sink", namespace="unread", lifetime="detached").remote()
    try:
        rf.get(sink.count.remote(), timeout=60)
        driver, line = start_driver(UNREAD_DRIVER.format(address=address, temp_dir=str(temp_dir)))
        ids = set(json.loads(line))
        assert len(ids) == 40
        driver.kill()
        driver.wait(10)
        wait_for(lambda: not kept(cluster, ids), 30, "no node keeping a gone driver's result")
    finally:
        rf.kill(sink)


QUEUING_DRIVER = """
import sys
import time
from pathlib import Path
import rayfield as rf

rf.init(address={address!r}, temp_dir={temp_dir!r})

@rf.remote(num_cpus=1)
def slow(i, runs):
    Path(runs, f"ran-{{i}}").touch()
    time.sleep(1.0)
    return i

# Half queue on the head, half on node b (only it has b_res): one CPU each.
refs = [slow.remote(i, {runs!r}) for i in range(12)]
refs += [slow.options(resources={{"b_res": 1}}).remote(i, {runs!r}) for i in range(12, 24)]
# And three that no node fits: demand (infeasible) until the driver goes.
refs += [slow.options(resources={{"nowhere": 1}}).remote(i, {runs!r}) for i in range(24, 27)]
print("submitted", flush=True)
if sys.stdin.readline().strip() == "shutdown":
    rf.shutdown()
    print("shut down", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("ending", ["killed", "shutdown"])
def test_a_gone_drivers_queued_tasks_never_run_on_any_node(
    nodes: tuple[str, Path], tmp_path: Path, ending: str
) -> None:
    """A driver killed, or one that calls ``rayfield.shutdown()`` and lives on: the tasks
    it left queued on every node are cancelled, and those no node fits leave the
    cluster's demand (an autoscaler would scale for them)."""
    address, temp_dir = nodes
    idle(address, temp_dir)
    runs = tmp_path / "runs"
    runs.mkdir()
    script = QUEUING_DRIVER.format(address=address, temp_dir=str(temp_dir), runs=str(runs))
    driver, _ = start_driver(script)
    try:
        with GcsClient(address, find_token(address, temp_dir)) as gcs:

            def queued() -> list[int]:
                return [sum(d.count for d in n.demand) for n in gcs.get_nodes() if n.alive]

            wait_for(
                lambda: len(queued()) == 2 and all(queued()),
                20,
                "tasks queued on both nodes",
                interval=0.2,
            )
            wait_for(
                lambda: len(list(runs.iterdir())) >= 2,
                20,
                "a task running on each node",
                interval=0.2,
            )
            if ending == "killed":
                driver.send_signal(signal.SIGKILL)
                driver.wait(10)
            else:
                assert driver.stdin is not None and driver.stdout is not None
                driver.stdin.write("shutdown\n")
                driver.stdin.flush()
                assert driver.stdout.readline() == "shut down\n"
                assert driver.poll() is None
            started = len(list(runs.iterdir()))
            wait_for(lambda: not any(queued()), 15, "no task queued on any node", interval=0.2)
            wait_for(
                lambda: all(free == total for free, total in free_and_total(gcs)),
                15,
                "every node's resources free again",
                interval=0.2,
            )
        # At most the task each node had just dispatched when the driver died starts after.
        assert len(list(runs.iterdir())) <= started + 2 < 24
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


@rf.remote(num_cpus=0, max_restarts=1)
class Restartable:
    def __init__(self, marker: str) -> None:
        if Path(marker).exists():  # created again: slowly, so RESTARTING can be seen
            time.sleep(3)

    def ping(self) -> str:
        return "pong"

    def crash(self, marker: str) -> None:
        Path(marker).touch()
        os._exit(1)


def test_every_actor_is_in_the_gcs_table_and_its_state_kept_current(
    cluster: str, nodes: tuple[str, Path], tmp_path: Path
) -> None:
    with GcsClient(cluster, find_token(cluster, nodes[1])) as gcs:

        def state(actor: Any) -> str:
            found = [a for a in gcs.list_actors() if a.actor_id == actor._actor_id]
            return found[0].state.name if found else "missing"

        def listed(actor: Any) -> str:
            rows = rayfield.util.state.list_actors()
            return next((r["state"] for r in rows if r["actor_id"] == actor._actor_id.hex()), "")

        marker = str(tmp_path / "crashed")
        actor = Restartable.remote(marker)  # unnamed: recorded by its creator and its node
        assert rf.get(actor.ping.remote(), timeout=60) == "pong"
        # The table itself says so (task events are shipped every 0.5 s, and not read here).
        wait_for(
            lambda: state(actor) == "ALIVE", 5, "the unnamed actor ALIVE in the GCS", interval=0.2
        )
        assert listed(actor) == "ALIVE"
        actor.crash.remote(marker)
        wait_for(
            lambda: state(actor) == "RESTARTING",
            10,
            "the actor RESTARTING in the GCS",
            interval=0.2,
        )
        assert rf.get(actor.ping.remote(), timeout=60) == "pong"
        wait_for(lambda: state(actor) == "ALIVE", 5, "the actor ALIVE again", interval=0.2)
        rf.kill(actor)
        wait_for(
            lambda: state(actor) == "DEAD", 10, "the killed actor DEAD in the GCS", interval=0.2
        )
        assert listed(actor) == "DEAD"
