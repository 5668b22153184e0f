"""The inspection commands (list, memory, logs, timeline, stack, microbenchmark) run as
subprocesses against a two-node cluster started by the CLI, after a small workload."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clusterutil import CLI, rayfield_cmd

import rayfield as rf
from rayfield.testing import wait_for
from rayfield.util import state


@rf.remote
def on_head(x: int) -> int:
    print(f"on_head squares {x}")
    return x * x


@rf.remote(resources={"b": 1})
def on_b(x: int) -> int:
    print(f"on_b says {x}")
    return x * 2


@rf.remote(resources={"b": 1}, num_cpus=0)
class Greeter:
    def __init__(self) -> None:
        print("Greeter is up")

    def hello(self, word: str) -> int:
        print(f"Greeter hears {word}", flush=True)
        return os.getpid()


@rf.remote(num_cpus=0)
class Napper:
    def pid(self) -> int:
        return os.getpid()

    def napping_in_a_known_place(self, seconds: float) -> None:
        time.sleep(seconds)


@pytest.fixture(scope="module")
def workload(driver_cluster: tuple[str, Path]) -> dict[str, Any]:
    greeter = Greeter.remote()  # type: ignore[attr-defined]
    greeter_pid = rf.get(greeter.hello.remote("hi"))
    napper = Napper.remote()  # type: ignore[attr-defined]
    napper_pid = rf.get(napper.pid.remote())
    napper.napping_in_a_known_place.remote(120)  # still sleeping when `stack` looks
    kept = rf.put(np.zeros(2_000_000))  # 16 MB, held by this driver
    # One at a time: queued behind each other on the head's one CPU, some would move to
    # the other node's free CPU (load-based spillback).
    assert [rf.get(on_head.remote(i)) for i in range(3)] == [0, 1, 4]
    assert rf.get(on_b.remote(21)) == 42
    names = {"on_head", "on_b", "Greeter.hello", "Napper.pid"}
    wait_for(
        lambda: names <= {t["name"] for t in state.list_tasks()},
        20,
        "the task events of both nodes in the GCS",
        interval=0.2,
    )
    return {
        "greeter": greeter,
        "greeter_pid": greeter_pid,
        "napper": napper,
        "napper_pid": napper_pid,
        "kept": kept,
    }


def run(driver_cluster: tuple[str, Path], *args: str, check: bool = True) -> Any:
    """``rayfield ARGS --address A --temp-dir T``."""
    address, temp_dir = driver_cluster
    return rayfield_cmd(*args, "--address", address, "--temp-dir", str(temp_dir), check=check)


def run_json(driver_cluster: tuple[str, Path], *args: str) -> Any:
    return json.loads(run(driver_cluster, *args, "--format", "json").stdout)


def test_list_nodes_and_workers(driver_cluster: tuple[str, Path], workload: dict[str, Any]) -> None:
    nodes = run_json(driver_cluster, "list", "nodes")
    assert len(nodes) == 2 and all(n["alive"] and n["reachable"] for n in nodes)
    table = run(driver_cluster, "list", "nodes").stdout
    for n in nodes:
        assert n["address"] in table and n["node_id"][:12] in table
    assert "2 nodes" in table and "ALIVE" in table and "b" in table
    workers = run(driver_cluster, "list", "workers", "--filter", "state=actor").stdout
    assert str(workload["greeter_pid"]) in workers and "actor" in workers


def test_list_actors_table_and_filter(
    driver_cluster: tuple[str, Path], workload: dict[str, Any]
) -> None:
    [greeter] = run_json(driver_cluster, "list", "actors", "--filter", "class_name=Greeter")
    assert greeter["state"] == "ALIVE" and greeter["pid"] == workload["greeter_pid"]
    table = run(driver_cluster, "list", "actors").stdout
    line = next(line for line in table.splitlines() if "Greeter" in line)
    assert greeter["actor_id"] in line and str(workload["greeter_pid"]) in line
    assert "ALIVE" in line and greeter["node"] in line
    assert "Napper" in table


def test_list_tasks_from_both_nodes(
    driver_cluster: tuple[str, Path], workload: dict[str, Any]
) -> None:
    tasks = run_json(driver_cluster, "list", "tasks", "--limit", "0")
    nodes = {name: {t["node"] for t in tasks if t["name"] == name} for name in ("on_head", "on_b")}
    assert len(nodes["on_head"]) == 1 and len(nodes["on_b"]) == 1
    assert nodes["on_head"] != nodes["on_b"]
    assert any(t["state"] == "RUNNING" and t["actor_task"] for t in tasks)  # the nap
    only_b = run_json(driver_cluster, "list", "tasks", "--filter", "name=on_b")
    assert [t["name"] for t in only_b] == ["on_b"]
    two = run(driver_cluster, "list", "tasks", "--limit", "2").stdout
    assert "2 of " in two and "(--limit 0 shows all)" in two


def test_list_objects_and_memory_show_the_put(
    driver_cluster: tuple[str, Path], workload: dict[str, Any]
) -> None:
    kept = workload["kept"].hex()
    [obj] = [o for o in run_json(driver_cluster, "list", "objects") if o["object_id"] == kept]
    assert obj["size_bytes"] >= 16_000_000 and obj["owner_pid"] == os.getpid()
    text = run(driver_cluster, "memory").stdout
    [line] = [line for line in text.splitlines() if kept in line]
    assert "16.0 MB" in line and str(os.getpid()) in line and "pinned" in line
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("OBJECT ID"))
    assert lines[header + 2].startswith(kept)  # largest first: ours (after the rule)
    assert "Object stores" in text
    report = run_json(driver_cluster, "memory", "--limit", "1")
    assert [o["object_id"] for o in report["objects"]] == [kept]
    assert report["objects"][0]["reason"].startswith("pinned (primary copy")
    assert len(report["nodes"]) == 2
    assert max(n["store_used"] for n in report["nodes"]) >= 16_000_000


def test_logs_by_task_actor_and_pid(
    driver_cluster: tuple[str, Path], workload: dict[str, Any]
) -> None:
    [task] = [t for t in state.list_tasks() if t["name"] == "on_b"]
    assert "on_b says 21" in run(driver_cluster, "logs", "--task", task["task_id"][:30]).stdout
    [actor] = [a for a in state.list_actors() if a["class_name"] == "Greeter"]
    by_actor = run(driver_cluster, "logs", "--actor", actor["actor_id"])
    assert "Greeter is up" in by_actor.stdout and "Greeter hears hi" in by_actor.stdout
    assert f"worker-{workload['greeter_pid']}.out" in by_actor.stderr  # the header
    last = run(driver_cluster, "logs", str(workload["greeter_pid"]), "--lines", "1").stdout
    assert last == "Greeter hears hi\n"
    listing = run(driver_cluster, "logs", "--list").stdout
    assert f"worker-{workload['greeter_pid']}.out" in listing and "gcs.out" in listing
    head = next(n for n in state.list_nodes() if "b" not in n["resources_total"])
    assert (
        "GCS listening on"
        in run(driver_cluster, "logs", "--node", head["address"], "gcs.out").stdout
    )


def test_logs_follow_prints_new_output(
    driver_cluster: tuple[str, Path], workload: dict[str, Any]
) -> None:
    address, temp_dir = driver_cluster
    cmd = [*CLI, "logs", str(workload["greeter_pid"]), "--follow", "--interval-s", "0.1"]
    cmd += ["--address", address, "--temp-dir", str(temp_dir)]
    # Started with SIGINT ignored, as a shell without job control starts a background
    # command (CI scripts do; the action is inherited across exec): Python then installs
    # no KeyboardInterrupt handler, and the command must end on Ctrl-C all the same
    # (once, in CI, it did not).
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "Greeter is up\n"  # the tail first
        assert proc.stdout.readline() == "Greeter hears hi\n"
        rf.get(workload["greeter"].hello.remote("later"))
        assert proc.stdout.readline() == "Greeter hears later\n"  # then what is appended
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:  # where it hangs, for the failure report
            spy = ["py-spy", "dump", "--pid", str(proc.pid)]
            dump = subprocess.run(spy, capture_output=True, text=True, timeout=30)
            proc.kill()
            proc.communicate()
            pytest.fail(f"`rayfield logs --follow` ignored Ctrl-C for 20 s:\n{dump.stdout}")
    assert proc.returncode == 0, err


def test_timeline_writes_a_trace_of_both_nodes(
    driver_cluster: tuple[str, Path], workload: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "trace.json"
    printed = run(driver_cluster, "timeline", "--output", str(out)).stdout
    assert str(out) in printed and "chrome://tracing" in printed and "perfetto" in printed
    assert f"({out.stat().st_size / 1000:.1f} kB)" in printed
    trace = json.loads(out.read_text())
    phases = {e["args"]["phase"] for e in trace if e["cat"] in ("task", "actor_call")}
    assert {"queued", "fetching arguments", "running", "storing results"} <= phases
    assert len({e["pid"] for e in trace}) == 2 and all(e["ph"] == "X" for e in trace)
    assert {"on_head", "on_b"} <= {e["name"] for e in trace}
    fewer = tmp_path / "few.json"
    run(driver_cluster, "timeline", "--output", str(fewer), "--limit", "1")
    assert 1 <= len(json.loads(fewer.read_text())) <= 4  # one task: a span per phase


def test_stack_shows_the_sleeping_actor_frame(
    driver_cluster: tuple[str, Path], workload: dict[str, Any]
) -> None:
    out = run(driver_cluster, "stack").stdout
    dumps = {int(part.split()[0]): part for part in out.split("=== worker ")[1:]}
    assert {workload["greeter_pid"], workload["napper_pid"]} <= set(dumps)
    napper = dumps[workload["napper_pid"]]
    # py-spy names the frame's file by its path or, for code shipped by value as here, as
    # "<dynamic-code>" (py-spy 0.4.3): the frame itself is what must show.
    assert "Napper.napping_in_a_known_place (" in napper
    assert (
        "MainThread" in napper and "napping_in_a_known_place" not in dumps[workload["greeter_pid"]]
    )


def test_microbenchmark_prints_every_row(tmp_path: Path) -> None:
    out = rayfield_cmd(
        "microbenchmark", "--budget-s", "0.05", "--temp-dir", str(tmp_path / "mb")
    ).stdout
    rows = [
        "single client get calls",
        "single client put calls",
        "single client put gigabytes",
        "single client tasks sync",
        "single client tasks async",
        "1:1 actor calls sync",
        "1:1 actor calls async",
        "1:1 actor calls concurrent",
    ]
    lines = out.splitlines()
    for row in rows:
        [line] = [line for line in lines if line.startswith(row + " ")]
        rate, unit = line[len(row) :].split(maxsplit=1)
        assert float(rate.replace(",", "")) > 0
        assert unit == ("GB/s" if "gigabytes" in row else "per second")


def test_errors_go_to_stderr_with_a_fix(
    driver_cluster: tuple[str, Path], workload: dict[str, Any], tmp_path: Path
) -> None:
    for args in (["list", "nodes"], ["logs", "--list"]):
        nobody = rayfield_cmd(*args, "--address", "127.0.0.1:1", check=False)
        assert nobody.returncode == 1 and nobody.stdout == "", args
        assert "no rayfield cluster answers at 127.0.0.1:1" in nobody.stderr
    none_here = rayfield_cmd("list", "actors", "--temp-dir", str(tmp_path), check=False)
    assert none_here.returncode == 1 and "rayfield start --head" in none_here.stderr
    unknown = run(driver_cluster, "logs", "--actor", "ffffeeee", check=False)
    assert unknown.returncode == 1 and "rayfield list actors" in unknown.stderr
    bad = run(driver_cluster, "list", "actors", "--filter", "colour=red", check=False)
    assert bad.returncode == 2 and "no field 'colour'" in bad.stderr and "class_name" in bad.stderr
    bad = run(driver_cluster, "list", "tasks", "--filter", "name", check=False)
    assert bad.returncode == 2 and "not key=value" in bad.stderr
    both = run(driver_cluster, "logs", "123", "--list", check=False)
    assert both.returncode == 2 and "give one of" in both.stderr
    gcs = run(
        driver_cluster, "logs", "--node", driver_cluster[0], "gcs.out", check=False
    )  # not a node
    assert gcs.returncode == 1 and "no alive node match" in gcs.stderr
    node = state.list_nodes()[0]["address"]
    missing = run(driver_cluster, "logs", "--node", node, "nope.out", check=False)
    assert missing.returncode == 1 and "rayfield logs --list" in missing.stderr
