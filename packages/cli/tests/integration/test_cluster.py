"""A three-node cluster on one machine, started and stopped with the `rayfield` command.

Every node is a separate process with its own store, socket and ports; the driver is
this test process, connected with ``init(address="HOST:PORT")``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from clusterutil import rayfield_cmd, stop_in_background

import rayfield as rf
from rayfield.testing import wait_for
from rayfield.util import state


class Cluster:
    def __init__(self, temp_dir: Path) -> None:
        self.temp_dir = temp_dir
        out = rayfield_cmd(
            "start", "--head", "--port", "0", "--num-cpus", "1", "--temp-dir", str(temp_dir)
        ).stdout
        self.head_output = out
        self.address = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())[
            "gcs_address"
        ]
        self.nodes: dict[str, str] = {"head": self._latest_node_id()}
        for name, resources in (("b", {"b_res": 2}), ("c", {"c_res": 1})):
            out = rayfield_cmd(
                "start",
                "--address",
                self.address,
                "--num-cpus",
                "1",
                "--resources",
                json.dumps(resources),
                "--temp-dir",
                str(temp_dir),
            ).stdout
            self.nodes[name] = out.split("rayfield node started in ")[1].split(": ")[1][:12]

    def _latest_node_id(self) -> str:
        info = json.loads((self.temp_dir / "session_latest" / "node.json").read_text())
        return str(info["node_id"])[:12]

    def processes(self) -> list[psutil.Process]:
        from rayfield.util.cluster import rayfield_processes

        return rayfield_processes(self.temp_dir)

    def stop(self) -> str:
        return rayfield_cmd("stop", "--temp-dir", str(self.temp_dir)).stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    temp_dir = tmp_path_factory.mktemp("rf")
    c = Cluster(temp_dir)
    rf.init(address=c.address, temp_dir=str(temp_dir))
    try:
        yield c
    finally:
        rf.shutdown()
        stop_in_background(temp_dir)


@rf.remote
def node_of() -> str:
    return str(rf.get_runtime_context().get_node_id())[:12]


@rf.remote
def checksum(a: np.ndarray) -> tuple[str, float, int]:
    return str(rf.get_runtime_context().get_node_id())[:12], float(a.sum()), a.nbytes


def test_head_prints_address_and_next_commands(cluster: Cluster) -> None:
    out = cluster.head_output
    assert f"The cluster's address is {cluster.address}" in out
    assert f"rayfield start --address {cluster.address}" in out
    assert f'rayfield.init(address="{cluster.address}")' in out


def test_tasks_land_where_their_resources_are(cluster: Cluster) -> None:
    on_b = rf.get([node_of.options(resources={"b_res": 1}).remote() for _ in range(6)])
    on_c = rf.get([node_of.options(resources={"c_res": 1}).remote() for _ in range(3)])
    assert set(on_b) == {cluster.nodes["b"]}
    assert set(on_c) == {cluster.nodes["c"]}
    assert rf.get(node_of.remote()) == cluster.nodes["head"]  # the driver's node fits it


def test_200mb_array_put_on_one_node_is_read_intact_on_the_others(cluster: Cluster) -> None:
    a = np.random.default_rng(0).standard_normal(25_000_000)  # 200 MB
    ref = rf.put(a)
    want = float(a.sum())
    for res in ("b_res", "c_res"):
        node, total, nbytes = rf.get(checksum.options(resources={res: 1}).remote(ref))
        assert node == cluster.nodes[res[0]]
        assert nbytes == a.nbytes and total == pytest.approx(want, rel=0, abs=1e-6)


@rf.remote(resources={"b_res": 1})
def make_array(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(25_000_000)


def test_array_made_on_another_node_reaches_the_driver_and_a_third_node(cluster: Cluster) -> None:
    ref = make_array.remote(7)
    a = rf.get(ref)
    expected = np.random.default_rng(7).standard_normal(25_000_000)
    assert np.array_equal(a, expected)
    node, total, _ = rf.get(checksum.options(resources={"c_res": 1}).remote(ref))
    assert node == cluster.nodes["c"] and total == pytest.approx(float(expected.sum()))


@rf.remote(resources={"b_res": 1})
def make_8mb(seed: int) -> np.ndarray:
    return np.full(1_000_000, float(seed))


def test_freed_objects_leave_every_node_and_the_object_directory(cluster: Cluster) -> None:
    from rayfield._private.gcs.client import GcsClient
    from rayfield._private.node_manager.node_service import PeerChannels
    from rayfield.util.cluster import find_token

    token = find_token(cluster.address, cluster.temp_dir)
    gcs = GcsClient(cluster.address, token)
    channels = PeerChannels(token, None)
    try:
        nodes = {n.node_id.hex()[:12]: n for n in gcs.get_nodes() if n.alive}
        b, c = nodes[cluster.nodes["b"]], nodes[cluster.nodes["c"]]
        put = rf.put(np.full(1_000_000, 3.0))  # 8 MB on the head, read on b and c
        for res in ("b_res", "c_res"):
            assert rf.get(checksum.options(resources={res: 1}).remote(put))[1] == 3e6
        made = make_8mb.remote(5)  # made on b, pulled by the head for the driver
        assert float(rf.get(made)[0]) == 5.0
        ids = [put.binary(), made.binary()]

        def rows() -> dict[bytes, set[bytes]]:
            return {k: set(v) for k, v in gcs.get_object_locations(ids).items()}

        def held() -> list[bool]:
            return [x for n in (b, c) for x in channels.stub(n.address).has_objects(ids)]

        wait_for(
            lambda: rows()[ids[0]] == {b.node_id, c.node_id} and b.node_id in rows()[ids[1]],
            30,
            "the copies recorded in the directory",
        )
        assert held() == [True, True, True, False]  # b: both; c: the put
        del put, made  # the driver frees both: every copy goes, and every row
        wait_for(lambda: held() == [False] * 4, 30, "the copies on b and c freed")
        wait_for(lambda: rows() == {ids[0]: set(), ids[1]: set()}, 30, "the rows forgotten")
    finally:
        channels.close()
        gcs.close()


@rf.remote(resources={"b_res": 1})
def sized(i: int) -> bytes:
    return bytes([i % 256]) * ((3 << 20) if i % 40 == 0 else i)


def test_many_spilled_tasks_come_back_small_ones_in_the_poll_large_ones_pulled(
    cluster: Cluster,
) -> None:
    # Forwarded in batches; results up to 1 MiB come back inside the origin's long poll,
    # the 3 MiB ones by a pull, both kinds in the same poll.
    out = rf.get([sized.remote(i) for i in range(400)])
    assert [len(x) for x in out] == [(3 << 20) if i % 40 == 0 else i for i in range(400)]
    assert all(x == bytes([i % 256]) * len(x) for i, x in enumerate(out))


@rf.remote(resources={"b_res": 1})
def put_inside() -> list[rf.ObjectRef]:
    return [rf.put(np.full(1000, 3.0))]


def test_ref_to_an_object_put_on_another_node_is_found(cluster: Cluster) -> None:
    [inner] = rf.get(put_inside.remote())
    assert float(rf.get(inner).sum()) == 3000.0


def test_work_no_node_fits_waits_and_status_shows_it(cluster: Cluster) -> None:
    ref = node_of.options(resources={"nowhere": 1}).remote()
    ready, _ = rf.wait([ref], timeout=1.0)
    assert ready == []

    def status_with_demand() -> str:
        out = rayfield_cmd("status", "--temp-dir", str(cluster.temp_dir)).stdout
        return out if "nowhere" in out else ""

    out = wait_for(status_with_demand, 20, "the infeasible demand in rayfield status", interval=0.2)
    assert "3 node(s) alive" in out
    assert "1 x 1 CPU, 1 nowhere: infeasible" in out
    assert "/3 CPU used" in out and "/2 b_res used" in out and "/1 c_res used" in out
    rf.cancel(ref)


def test_status_json_lists_every_node(cluster: Cluster) -> None:
    nodes = json.loads(
        rayfield_cmd("status", "--format", "json", "--temp-dir", str(cluster.temp_dir)).stdout
    )
    assert {n["node_id"][:12] for n in nodes} == set(cluster.nodes.values())
    assert all(n["alive"] for n in nodes)


def test_nodes_listen_on_loopback_only(cluster: Cluster) -> None:
    ports = []
    for proc in cluster.processes():
        for conn in proc.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                ports.append(conn.laddr)
    assert ports, "the cluster has TCP listeners"

    def loopback(ip: str) -> bool:
        addr = ipaddress.ip_address(ip)
        mapped = getattr(addr, "ipv4_mapped", None)
        return bool(addr.is_loopback or (mapped is not None and mapped.is_loopback))

    assert all(loopback(addr.ip) for addr in ports), ports


def test_a_call_without_the_token_is_refused_and_the_node_keeps_serving(cluster: Cluster) -> None:
    import grpc

    from rayfield._private.gcs.client import GcsClient
    from rayfield.util.cluster import find_token

    token = find_token(cluster.address, cluster.temp_dir)
    gcs = GcsClient(cluster.address, token)
    node = next(n for n in gcs.get_nodes() if n.node_id.hex()[:12] == cluster.nodes["b"])
    gcs.close()
    channel = grpc.insecure_channel(node.address)
    has = channel.unary_unary("/rayfield.Node/HasObjects")
    for metadata in ((), (("authorization", "Bearer " + "0" * 64),)):
        with pytest.raises(grpc.RpcError) as err:
            has(b"\x00" * 64, metadata=metadata, timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:  # right token, garbage payload
        has(os.urandom(200), metadata=(("authorization", f"Bearer {token}"),), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    host, port = node.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:  # not even HTTP/2
        s.sendall(os.urandom(4096))
    channel.close()
    assert rf.get(node_of.options(resources={"b_res": 1}).remote()) == cluster.nodes["b"]


def test_start_refuses_flags_that_mean_nothing_here(tmp_path: Path) -> None:
    bad = rayfield_cmd("start", "--head", "--redis-shard-ports", "6380", check=False)
    assert bad.returncode == 2 and "no Redis shards" in bad.stderr
    both = rayfield_cmd("start", "--head", "--address", "127.0.0.1:1", check=False)
    assert both.returncode == 2 and "leave it out with --head" in both.stderr
    neither = rayfield_cmd("start", check=False)
    assert neither.returncode == 2 and "--head" in neither.stderr
    res = rayfield_cmd("start", "--head", "--resources", "[1]", check=False)
    assert res.returncode == 2 and "JSON object" in res.stderr
    env = {k: v for k, v in os.environ.items() if k != "RAYFIELD_TOKEN"}
    no_token = rayfield_cmd(
        "start", "--address", "127.0.0.1:1", "--temp-dir", str(tmp_path), check=False, env=env
    )
    assert no_token.returncode == 1 and "RAYFIELD_TOKEN" in no_token.stderr


def _running(proc: psutil.Process) -> bool:
    """Not exited (a zombie has exited: only init's reaping of it is left)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_stop_leaves_no_process_or_socket(tmp_path: Path) -> None:
    c = Cluster.__new__(Cluster)
    c.temp_dir = tmp_path
    rayfield_cmd("start", "--head", "--port", "0", "--num-cpus", "1", "--temp-dir", str(tmp_path))
    info = json.loads((tmp_path / "session_latest" / "node.json").read_text())
    procs = c.processes()
    workers = [w for p in procs for w in p.children(recursive=True)]
    assert len(procs) == 2 and workers
    assert os.path.exists(info["socket"])
    out = c.stop()
    assert "stopped 2 rayfield processes" in out
    assert not any(_running(p) for p in procs + workers)
    assert not os.path.exists(info["socket"])
    assert "no rayfield processes were running" in c.stop()


@rf.remote(resources={"b_res": 1})
class Counter:
    def __init__(self, start: int) -> None:
        self.n = start

    def add(self, k: int) -> tuple[str, int]:
        self.n += k
        return str(rf.get_runtime_context().get_node_id())[:12], self.n


@rf.remote(resources={"c_res": 1})
def call_from_c(counter: Any) -> tuple[str, list[int]]:
    here = str(rf.get_runtime_context().get_node_id())[:12]
    return here, [n for _, n in rf.get([counter.add.remote(1) for _ in range(5)])]


@rf.remote(resources={"c_res": 1})
def call_by_name(name: str) -> tuple[str, int]:
    try:
        counter = rf.get_actor(name)
    except ValueError as exc:
        return "missing", len(str(exc))
    return rf.get(counter.add.remote(10))


@rf.remote(resources={"c_res": 1})
def create_named(name: str) -> str:
    try:
        Counter.options(name=name).remote(0)
    except ValueError as exc:
        return str(exc)
    return "created"


def test_named_actor_is_found_from_another_node_and_its_name_is_unique(cluster: Cluster) -> None:
    counter = Counter.options(name="shared-counter").remote(0)
    assert rf.get(counter.add.remote(1))[1] == 1
    node, n = rf.get(call_by_name.remote("shared-counter"))  # named by the head's driver
    assert node == cluster.nodes["b"] and n == 11
    assert rf.get(call_by_name.remote("no-such-actor"))[0] == "missing"
    taken = rf.get(create_named.remote("shared-counter"))  # from node c: one name per cluster
    assert "shared-counter" in taken and "taken" in taken
    [listed] = wait_for(
        lambda: [
            a
            for a in state.list_actors()
            if a["name"] == "shared-counter" and a["state"] == "ALIVE"
        ],
        20,
        "the named actor listed ALIVE",
        interval=0.2,
    )
    assert listed["class_name"] == "Counter"
    rf.kill(counter)  # it lives on node b: its node kills it, and the name is free again
    with pytest.raises(rf.exceptions.ActorDiedError):
        rf.get(counter.add.remote(1), timeout=30)
    assert rf.get(create_named.remote("shared-counter")) == "created"


def test_actor_lives_where_its_resources_are_and_is_callable_from_every_node(
    cluster: Cluster,
) -> None:
    counter = Counter.remote(100)
    results = rf.get([counter.add.remote(1) for _ in range(20)])
    assert {node for node, _ in results} == {cluster.nodes["b"]}
    assert [n for _, n in results] == list(range(101, 121))  # calls from one handle in order
    here, seen = rf.get(call_from_c.remote(counter))
    assert here == cluster.nodes["c"] and seen == list(range(121, 126))
    assert rf.get(counter.add.remote(0))[1] == 125


def test_classic_state_api_covers_every_node(cluster: Cluster) -> None:
    nodes = rf.nodes()
    assert {n["NodeID"][:12] for n in nodes if n["Alive"]} == set(cluster.nodes.values())
    totals = rf.cluster_resources()
    assert totals["CPU"] == 3 and totals["b_res"] == 2 and totals["c_res"] == 1
    marker = rf.get(node_of.options(resources={"c_res": 1}, name="on_c_marker").remote())
    assert marker == cluster.nodes["c"]
    wait_for(
        lambda: rf.available_resources().get("c_res") == 1,
        20,
        "c_res free again in the GCS view",
        interval=0.2,
    )
    done = wait_for(
        lambda: [t for t in rf.tasks() if t["name"] == "on_c_marker"],
        20,
        "node c's task event",
        interval=0.2,
    )
    assert done[0]["state"] == "FINISHED" and done[0]["node"] != "127.0.0.1"
    trace = rf.timeline()
    assert any(e.get("name") == "on_c_marker" for e in trace)


AUTO_DRIVER = """
import sys
import rayfield as rf
rf.init(address="auto", temp_dir=sys.argv[1])
print(rf.cluster_resources()["b_res"], flush=True)
rf.shutdown()
"""


def test_jobs_are_recorded_and_auto_joins_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    script = tmp_path / "auto_driver.py"
    script.write_text(AUTO_DRIVER)
    done = subprocess.run(
        [sys.executable, str(script), str(cluster.temp_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2.0"  # address="auto" sees the whole cluster
    out = rayfield_cmd("list", "jobs", "--format", "json", "--temp-dir", str(cluster.temp_dir))
    jobs = {j["job_id"]: j for j in json.loads(out.stdout)}
    mine = jobs[rf.get_runtime_context().job_id]
    assert mine["state"] == "RUNNING" and mine["driver_pid"] == os.getpid()
    [other] = [j for j in jobs.values() if "auto_driver.py" in j["entrypoint"]]
    assert other["state"] == "FINISHED" and other["end_s"] >= other["start_s"]
    table = rayfield_cmd("list", "jobs", "--temp-dir", str(cluster.temp_dir)).stdout
    assert mine["job_id"] in table and "RUNNING" in table and "FINISHED" in table

    # A driver killed without shutdown(): its node marks its job finished.
    script.write_text(AUTO_DRIVER.replace("rf.shutdown()", "import time; time.sleep(600)"))
    killed = subprocess.Popen([sys.executable, str(script), str(cluster.temp_dir)])
    try:
        wait_for(
            lambda: any(j["driver_pid"] == killed.pid for j in state.list_jobs()),
            20,
            "the second driver's job",
            interval=0.2,
        )
    finally:
        killed.kill()
        killed.wait()
    [job] = wait_for(
        lambda: [j for j in state.list_jobs() if j["driver_pid"] == killed.pid and j["end_s"]],
        20,
        "the killed driver's job to end",
        interval=0.2,
    )
    assert job["state"] == "FINISHED"


def test_objects_travel_on_the_data_channel_which_refuses_a_wrong_token(
    cluster: Cluster,
) -> None:
    from rayfield._private.gcs.client import GcsClient
    from rayfield._private.node_manager import data_channel as dc
    from rayfield._private.node_manager.node_service import PeerChannels
    from rayfield.util.cluster import find_token

    token = find_token(cluster.address, cluster.temp_dir)
    with GcsClient(cluster.address, token) as gcs:
        node = next(n for n in gcs.get_nodes() if n.node_id.hex()[:12] == cluster.nodes["b"])
    channels = PeerChannels(token, None)
    port = channels.stub(node.address).data_port(dc.VERSION)
    assert channels.stub(node.address).data_port(dc.VERSION + 1) == 0  # another version
    channels.close()
    host = node.address.rsplit(":", 1)[0]
    assert port > 0
    for hello in (dc.HELLO.pack(dc.MAGIC, dc.VERSION, 64) + b"0" * 64, os.urandom(300)):
        with socket.create_connection((host, port)) as s:
            s.sendall(hello)
            try:
                assert s.recv(10) == b""  # closed without an answer
            except ConnectionResetError:
                pass
    ref = make_array.remote(11)  # made on b, pulled by the head for the driver
    assert np.array_equal(rf.get(ref), np.random.default_rng(11).standard_normal(25_000_000))
    logs = [p.read_text() for p in cluster.temp_dir.glob("session_*/logs/node.out")]
    assert logs and not any("over gRPC" in text for text in logs)  # no fallback taken
