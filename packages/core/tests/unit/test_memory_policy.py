"""The memory monitor's logic without a node: victim policy, readings, waits, settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rayfield import testing
from rayfield._private.node_manager import memory_monitor as mm


def task(pid: int, seq: int, retriable: bool, actor: bool = False) -> dict[str, Any]:
    return {
        "pid": pid,
        "task_id": seq.to_bytes(20, "little"),
        "retriable": retriable,
        "actor_task": actor,
        "dispatch_seq": seq,
    }


def test_retriable_first_then_newest() -> None:
    tasks = [task(1, 5, False), task(2, 1, True), task(3, 3, True), task(4, 9, False)]
    assert mm.pick_victim(tasks)["pid"] == 3
    assert mm.pick_victim([task(1, 5, False), task(4, 9, False)])["pid"] == 4
    assert mm.pick_victim([]) is None


def test_never_the_excluded_pid_and_workers_count_once() -> None:
    assert mm.pick_victim([task(7, 9, True), task(8, 1, False)], exclude=7)["pid"] == 8
    # A threaded actor runs two calls: retriable only if both are.
    tasks = [task(1, 8, True, True), task(1, 9, False, True), task(2, 2, True)]
    victim = mm.pick_victim(tasks)
    assert victim["pid"] == 2
    only = mm.pick_victim(tasks[:2])
    assert only["pid"] == 1 and only["dispatch_seq"] == 9 and not only["retriable"]


def test_cgroup_reading(tmp_path: Path) -> None:
    assert mm.cgroup_memory(tmp_path) is None  # no cgroup files
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.current").write_text("500\n")
    assert mm.cgroup_memory(tmp_path) is None  # no limit
    (tmp_path / "memory.max").write_text("1000\n")
    (tmp_path / "memory.stat").write_text("anon 300\ninactive_file 100\nactive_file 50\n")
    usage = mm.cgroup_memory(tmp_path)
    assert usage == mm.MemoryUsage(400, 1000, "cgroup")
    assert usage.fraction == 0.4
    # The tighter of the two: a cgroup nearly full wins over a roomy machine.
    (tmp_path / "memory.current").write_text("1099\n")
    assert mm.memory_usage(tmp_path).source == "cgroup"


class FakeServer:
    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.tasks = tasks
        self.killed: list[tuple[int, str, str]] = []
        self.closing: set[int] = set()  # killed, but their sockets have not closed yet

    def running_tasks(self) -> list[dict[str, Any]]:
        gone = {k[0] for k in self.killed} - self.closing
        return [t for t in self.tasks if t["pid"] not in gone]

    def kill_worker(self, pid: int, tag: str, message: str) -> bool:
        self.killed.append((pid, tag, message))
        return True


def test_check_kills_one_worker_then_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    usage = [mm.MemoryUsage(99, 100, "system")]
    monkeypatch.setattr(mm, "memory_usage", lambda root: usage[0])
    server = FakeServer([task(1, 1, False), task(2, 2, True), task(os.getpid(), 3, True)])
    alive = {1, 2, os.getpid()}
    monitor = mm.MemoryMonitor(
        server, usage_threshold=0.9, interval_s=0.0, process_alive=alive.__contains__
    )
    assert monitor.check() == 2
    pid, tag, message = server.killed[0]
    assert pid == 2
    assert tag == "OUT_OF_MEMORY" and "killed by the memory monitor" in message
    assert mm.ENV_THRESHOLD in message
    # Its task is gone but its process still exits: its memory is not free yet.
    assert monitor.check() is None
    assert monitor.check() is None
    alive.discard(2)
    assert monitor.check() == 1  # the victim is gone, memory still high: the next one
    alive.discard(1)
    usage[0] = mm.MemoryUsage(50, 100, "system")
    server.tasks.append(task(5, 5, True))
    assert monitor.check() is None  # below the threshold
    assert monitor.kills == [2, 1]


def test_no_second_kill_while_the_victims_task_is_still_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mm, "memory_usage", lambda root: mm.MemoryUsage(99, 100, "system"))
    server = FakeServer([task(1, 1, True), task(2, 2, True)])
    monitor = mm.MemoryMonitor(
        server, usage_threshold=0.9, interval_s=0.0, process_alive=lambda pid: False
    )
    server.closing.add(2)
    assert monitor.check() == 2
    assert monitor.check() is None  # its process is gone, its socket not yet closed
    server.closing.clear()
    assert monitor.check() == 1
    assert [k[0] for k in server.killed] == [2, 1]


def test_a_victim_that_never_exits_holds_the_monitor_back_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mm, "memory_usage", lambda root: mm.MemoryUsage(99, 100, "system"))
    clock = [100.0]
    monkeypatch.setattr(mm.time, "monotonic", lambda: clock[0])
    server = FakeServer([task(1, 1, True), task(2, 2, True)])
    monitor = mm.MemoryMonitor(
        server, usage_threshold=0.9, interval_s=0.1, process_alive=lambda pid: True
    )
    assert monitor.check() == 2
    clock[0] += mm.VICTIM_WAIT_S - 0.5
    assert monitor.check() is None
    clock[0] += 1.0
    assert monitor.check() == 1


def test_holds_memory_of_real_processes() -> None:
    assert mm.holds_memory(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    testing.wait_for(lambda: not mm.holds_memory(child.pid), 20, "the child to exit")
    child.wait()
    assert not mm.holds_memory(child.pid)


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mm.ENV_THRESHOLD, "0.5")
    monkeypatch.setenv(mm.ENV_REFRESH_MS, "0")
    monitor = mm.MemoryMonitor.from_env(None)
    assert monitor.usage_threshold == 0.5 and not monitor.enabled
    monitor.start()  # disabled: no thread
    monitor.stop()
    monkeypatch.setenv(mm.ENV_THRESHOLD, "1.5")
    monkeypatch.delenv(mm.ENV_REFRESH_MS)
    monitor = mm.MemoryMonitor.from_env(None)
    assert monitor.usage_threshold == mm.DEFAULT_THRESHOLD and monitor.interval_s == 0.25
    with pytest.raises(ValueError, match="usage_threshold"):
        mm.MemoryMonitor(None, usage_threshold=0)
