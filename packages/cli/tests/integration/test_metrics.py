"""Metrics of a two-node cluster started by the CLI: application metrics recorded in
tasks on both nodes, system metrics, and the scrape config the head writes (the
``/metrics`` text parsed with ``prometheus_client``'s parser)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterutil import start_nodes, stop_in_background
from prometheus_client.parser import text_string_to_metric_families

import rayfield as rf
from rayfield.testing import wait_for
from rayfield.util.metrics import Counter, Gauge, Histogram
from rayfield.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def _scrape(address: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """name -> {labels: value} of every sample at ``http://address/metrics``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _nodes(temp_dir: Path) -> dict[str, str]:
    """node id -> metrics address, from every node's node.json under ``temp_dir``."""
    out = {}
    for node_json in temp_dir.glob("session_*/node.json"):
        info = json.loads(node_json.read_text())
        out[info["node_id"]] = info["metrics_export_address"]
    return out


@rf.remote
def work(counter: Counter, latency: Histogram, where: str) -> str:
    counter.inc(2.0, tags={"where": where})
    latency.observe(0.5)
    return str(rf.get_runtime_context().get_node_id())


@rf.remote
class Holder:
    def __init__(self) -> None:
        self.level = Gauge("test_actor_level", description="set in an actor")

    def node(self) -> str:
        self.level.set(3.0)
        return str(rf.get_runtime_context().get_node_id())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two nodes (the head with a dashboard) and this process as a driver; the temp dir."""
    temp_dir = tmp_path_factory.mktemp("rf")
    head_args = ("--include-dashboard", "--dashboard-port", "0")
    address = start_nodes(temp_dir, resources='{"b": 4}', head_args=head_args)
    rf.init(address=address, temp_dir=str(temp_dir))
    try:
        yield temp_dir
    finally:
        rf.shutdown()
        stop_in_background(temp_dir)


def test_metrics_of_two_nodes(cluster: Path) -> None:
    temp_dir = cluster
    nodes = _nodes(temp_dir)
    assert len(nodes) == 2
    counter = Counter("test_jobs_done", description="jobs done", tag_keys=("where",))
    latency = Histogram("test_latency_s", boundaries=[0.1, 1.0])
    counter.inc(1.0, tags={"where": "driver"})
    gauge = Gauge("test_level", tag_keys=("k",)).set_default_tags({"k": "v"})
    gauge.set(7.5)
    ran = []
    for node_id in nodes:
        pin = NodeAffinitySchedulingStrategy(node_id, soft=False)
        ran.append(rf.get(work.options(scheduling_strategy=pin).remote(counter, latency, "task")))
    assert sorted(ran) == sorted(nodes)
    holder = Holder.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(ran[1], soft=False)
    ).remote()
    assert rf.get(holder.node.remote()) == ran[1]

    driver_node = rf.get_runtime_context().get_node_id()
    for node_id, address in nodes.items():

        def counted(address: str = address) -> dict | None:
            got = _scrape(address)
            done = got.get("test_jobs_done_total", {}).get((("where", "task"),)) == 2.0
            # the counter and the histogram may reach the node in two writes of the task's
            return got if done and got.get("test_latency_s_count", {}).get(()) == 1.0 else None

        got = wait_for(counted, 20, f"the tasks' counter on node {node_id[:8]}", interval=0.2)
        assert got["test_latency_s_count"][()] == 1.0
        assert got["test_latency_s_bucket"][(("le", "1.0"),)] == 1.0
        assert got["test_latency_s_bucket"][(("le", "0.1"),)] == 0.0
        assert set(dict(k)["State"] for k in got["rayfield_tasks"]) >= {"RUNNING", "QUEUED"}
        assert got["rayfield_object_store_capacity_bytes"][()] > 0
        assert (
            got["rayfield_node_memory_total_bytes"][()]
            > got["rayfield_node_memory_used_bytes"][()]
            > 0
        )
        assert "rayfield_object_received_bytes_total" in got
        if node_id == driver_node:  # the driver's own records go to its node
            assert got["test_jobs_done_total"][(("where", "driver"),)] == 1.0
            assert got["test_level"][(("k", "v"),)] == 7.5
    on_holder = wait_for(
        lambda: (
            (got := _scrape(nodes[ran[1]]))["rayfield_actors"].get((("State", "ALIVE"),), 0) >= 1
            and got.get("test_actor_level", {}).get(()) == 3.0
        ),
        20,
        "the actor counted on its node, and its gauge",
        interval=0.2,
    )
    assert on_holder
    rf.kill(holder)

    head = (temp_dir / "session_latest").resolve() / "metrics"
    config = (head / "prometheus.yml").read_text()
    assert "file_sd_configs" in config and str(head / "prom_targets.json") in config
    targets = wait_for(
        lambda: (
            (t := json.loads((head / "prom_targets.json").read_text())[0]["targets"])
            and sorted(t) == sorted(nodes.values())
            and t
        ),
        20,
        "every node in the scrape targets",
        interval=0.2,
    )
    assert sorted(targets) == sorted(nodes.values())
    dashboard = json.loads((head / "grafana_dashboard.json").read_text())
    assert any("rayfield_tasks" in p["targets"][0]["expr"] for p in dashboard["panels"])
    assert oct((head / "prometheus.yml").stat().st_mode & 0o777) == "0o600"


def test_dashboard_samples_every_node(cluster: Path) -> None:
    session = (cluster / "session_latest").resolve()
    url = json.loads((session / "dashboard.json").read_text())["url"]
    token = (session / "token").read_text().strip()
    request = urllib.request.Request(
        url + "api/pages/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    nodes = set(_nodes(cluster).values())

    def sampled_twice() -> dict | None:
        with urllib.request.urlopen(request, timeout=10) as reply:
            data = json.loads(reply.read())
        cpu = next(s for s in data["series"] if s["name"] == "cpu_percent")
        drawn = {len(n["points"]) for n in cpu["nodes"]}
        return data if len(cpu["nodes"]) == len(nodes) and min(drawn) >= 2 else None

    data = wait_for(sampled_twice, 40, "two samples of every node in the dashboard", interval=0.2)
    assert data["window_s"] >= 3600
    names = {s["name"] for s in data["series"]}
    assert {"tasks_running", "store_used", "actors_alive", "received_per_s"} <= names
    for series in data["series"]:
        for node in series["nodes"]:
            times = [t for t, _ in node["points"]]
            assert times == sorted(times) and times[-1] <= data["now"]


def test_wrong_tags_are_clear_errors() -> None:
    counter = Counter("test_tagged", tag_keys=("a", "b"))
    with pytest.raises(ValueError, match=r"keys \['c'\] that are not among its tag_keys"):
        counter.inc(tags={"a": "1", "b": "2", "c": "3"})
    with pytest.raises(ValueError, match=r"needs a value for tag key\(s\) \['b'\]"):
        counter.inc(tags={"a": "1"})
    with pytest.raises(ValueError, match="not among its tag_keys"):
        counter.set_default_tags({"z": "1"})


@pytest.mark.slow
def test_a_real_prometheus_scrapes_both_nodes(cluster: Path, tmp_path: Path) -> None:
    """Debian's ``prometheus`` (apt-get install prometheus) reads the head's scrape config
    and its file discovery targets, and scrapes both nodes."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("no prometheus executable: apt-get install prometheus")
    head = (cluster / "session_latest").resolve() / "metrics"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={head / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    nodes = set(_nodes(cluster).values())

    def query(expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return list(json.loads(reply.read())["data"]["result"])
        except OSError:
            return []

    try:
        up = wait_for(
            lambda: {r["metric"]["instance"] for r in query("up == 1")} == nodes,
            90,
            "Prometheus to scrape every node",
            interval=0.2,
        )
        assert up
        cpus = query("rayfield_node_cpu_count")
        assert {r["metric"]["instance"] for r in cpus} == nodes
        assert query('rayfield_tasks{State="RUNNING"}')
    finally:
        proc.terminate()
        proc.wait(30)
