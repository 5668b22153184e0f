"""The memory monitor: kills a worker before the machine runs out of memory, and says so.

A thread of the node's host process (:class:`~rayfield._private.node_manager.node.Node`) reads
the memory usage every ``interval_s``: the machine's (psutil ``virtual_memory()``, used
= total - available) and, when the process runs in a cgroup v2 with a limit
(``/sys/fs/cgroup/memory.max``), the cgroup's (``memory.current`` less the reclaimable
``inactive_file`` page cache), whichever fraction is higher. Above ``usage_threshold``
it picks one worker among those running a task and SIGKILLs it through the node
(``NodeServer.kill_worker``), which records why, then logs a warning naming the worker's
pid, its task, the memory in use and how to change the threshold.

Policy (Ray's "retriable, then newest", see ``pick_victim``): a worker whose every task
would be retried (retries left, as the node counts them) goes first; among equals, the
one that was given its task most recently, since it has done the least work. The driver
is never a candidate, nor is an idle worker or an actor's worker between calls. After a
kill the monitor waits until the victim is gone and one more interval has passed before
it kills another, so the freed memory shows in the next reading.

What the task's caller sees: a task with retries left is resubmitted as after any worker
death; otherwise its ``get`` raises
:class:`~rayfield.exceptions.OutOfMemoryError` (a ``WorkerCrashedError``) whose message
says the memory monitor killed it and why; an actor call raises ``ActorDiedError`` with
the same explanation.

Settings, read when the node starts (same meaning as Ray's ``RAY_memory_usage_threshold``
and ``RAY_memory_monitor_refresh_ms``):

- ``RAYFIELD_MEMORY_USAGE_THRESHOLD``: a fraction in (0, 1], default 0.95.
- ``RAYFIELD_MEMORY_MONITOR_REFRESH_MS``: the interval in milliseconds, default 250;
  ``0`` turns the monitor off.

Sources: Ray's memory monitor design, "Out-Of-Memory Prevention",
https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

logger = logging.getLogger("rayfield")

ENV_THRESHOLD = "RAYFIELD_MEMORY_USAGE_THRESHOLD"
ENV_REFRESH_MS = "RAYFIELD_MEMORY_MONITOR_REFRESH_MS"
DEFAULT_THRESHOLD = 0.95
DEFAULT_INTERVAL_S = 0.25
CGROUP_DIR = Path("/sys/fs/cgroup")
ERROR_TAG = "OUT_OF_MEMORY"  # the error object's metadata; get raises OutOfMemoryError
VICTIM_WAIT_S = 10.0  # the longest wait for a killed worker to go before the next kill
_GB = 1e9


@dataclass(frozen=True)
class MemoryUsage:
    """Memory in use and the total it counts against, in bytes."""

    used_bytes: int
    total_bytes: int
    source: str  # "system" or "cgroup"

    @property
    def fraction(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"{self.used_bytes / _GB:.2f} GB of {self.total_bytes / _GB:.2f} GB "
            f"({self.fraction:.3f}, {self.source})"
        )


def system_memory() -> MemoryUsage:
    """The machine's memory in use: total less what is available without swapping."""
    vm = psutil.virtual_memory()
    return MemoryUsage(int(vm.total - vm.available), int(vm.total), "system")


def cgroup_memory(root: Path = CGROUP_DIR) -> MemoryUsage | None:
    """The cgroup v2 usage under ``root``; None without a limit or a readable cgroup."""
    try:
        limit = (root / "memory.max").read_text().strip()
        current = int((root / "memory.current").read_text())
    except (OSError, ValueError):
        return None
    if limit == "max" or not limit.isdigit() or int(limit) <= 0:
        return None
    inactive_file = 0
    try:
        for line in (root / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "inactive_file":
                inactive_file = int(value)
                break
    except (OSError, ValueError):
        pass
    return MemoryUsage(max(0, current - inactive_file), int(limit), "cgroup")


def memory_usage(cgroup_root: Path = CGROUP_DIR) -> MemoryUsage:
    """The tighter of the machine's and the cgroup's usage (the higher fraction)."""
    system = system_memory()
    cgroup = cgroup_memory(cgroup_root)
    return cgroup if cgroup is not None and cgroup.fraction > system.fraction else system


def pick_victim(tasks: list[dict[str, Any]], exclude: int | None = None) -> dict[str, Any] | None:
    """The worker to kill: retriable first, then the most recently dispatched task.

    Args:
        tasks: ``NodeServer.running_tasks()`` entries (``pid``, ``task_id``,
            ``retriable``, ``actor_task``, ``dispatch_seq``). A worker running several
            tasks (a threaded actor) counts as retriable only if all of them are.
        exclude: a pid never chosen (the driver's).

    Returns:
        The chosen worker's newest task entry, with ``retriable`` for the whole worker;
        None when no worker runs a task.
    """
    workers: dict[int, dict[str, Any]] = {}
    for t in tasks:
        if t["pid"] == exclude:
            continue
        w = workers.get(t["pid"])
        if w is None:
            workers[t["pid"]] = dict(t)
            continue
        retriable = w["retriable"] and t["retriable"]
        if t["dispatch_seq"] > w["dispatch_seq"]:
            w.update(t)
        w["retriable"] = retriable
    return max(workers.values(), key=lambda w: (w["retriable"], w["dispatch_seq"]), default=None)


def holds_memory(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a zombie's memory is free)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class MemoryMonitor:
    """Polls memory usage and kills one worker at a time while it is above the threshold.

    Args:
        server: the node's ``NodeServer`` (``running_tasks``, ``kill_worker``).
        usage_threshold: the fraction of memory in use above which a worker is killed,
            in (0, 1].
        interval_s: seconds between readings; 0 or less: the monitor does nothing.
        cgroup_root: where the cgroup v2 files are read.
        process_alive: whether a pid's process still holds memory (running, not a
            zombie); the default asks the operating system.
    """

    def __init__(
        self,
        server: Any,
        usage_threshold: float = DEFAULT_THRESHOLD,
        interval_s: float = DEFAULT_INTERVAL_S,
        cgroup_root: Path = CGROUP_DIR,
        process_alive: Callable[[int], bool] | None = None,
    ) -> None:
        if not 0 < usage_threshold <= 1:
            raise ValueError(f"usage_threshold must be in (0, 1], got {usage_threshold}")
        self.server = server
        self.usage_threshold = usage_threshold
        self.interval_s = interval_s
        self.cgroup_root = cgroup_root
        self.process_alive = process_alive or holds_memory
        self.kills: list[int] = []  # pids killed, oldest first
        self._victim: tuple[int, float] | None = None  # (pid, monotonic time of the kill)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name="rayfield-memory-monitor"
        )

    @classmethod
    def from_env(cls, server: Any) -> MemoryMonitor:
        """A monitor with the settings of ``RAYFIELD_MEMORY_*`` (bad values: the defaults)."""
        threshold, interval_s = DEFAULT_THRESHOLD, DEFAULT_INTERVAL_S
        raw = os.environ.get(ENV_THRESHOLD)
        if raw:
            try:
                threshold = float(raw)
                if not 0 < threshold <= 1:
                    raise ValueError
            except ValueError:
                threshold = DEFAULT_THRESHOLD
                logger.warning("%s=%r is not in (0, 1]; using %s", ENV_THRESHOLD, raw, threshold)
        raw = os.environ.get(ENV_REFRESH_MS)
        if raw:
            try:
                interval_s = int(raw) / 1000
            except ValueError:
                logger.warning("%s=%r is not an integer; using %d", ENV_REFRESH_MS, raw, 250)
        return cls(server, threshold, interval_s)

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # never let a bad reading end the monitor
                logger.exception("memory monitor: check failed")

    def check(self) -> int | None:
        """Read the usage once; kill a worker if it is above the threshold. Returns its pid.

        After a kill nothing more is killed until the victim has gone, or for at most
        ``VICTIM_WAIT_S``: its task must have left the running tasks (the node sees that
        when the worker's socket closes, which the kernel does after it has freed the
        process's memory) and its process must have exited. Only then is the usage read
        again, so a reading taken while the victim still held its memory never picks a
        second one.
        """
        if self._victim is not None:
            pid, at = self._victim
            waited = time.monotonic() - at
            listed = any(t["pid"] == pid for t in self.server.running_tasks())
            if waited < VICTIM_WAIT_S and (
                listed or self.process_alive(pid) or waited < self.interval_s
            ):
                return None
            self._victim = None
        usage = memory_usage(self.cgroup_root)
        if usage.fraction <= self.usage_threshold:
            return None
        tasks = self.server.running_tasks()
        victim = pick_victim(tasks, exclude=os.getpid())
        if victim is None:
            return None
        pid = victim["pid"]
        log_message = self._log_message(victim, usage)  # reads its size while it lives
        if not self.server.kill_worker(pid, ERROR_TAG, self._error_message(usage)):
            return None  # the worker is already gone
        self._victim = (pid, time.monotonic())
        self.kills.append(pid)
        logger.warning(log_message)
        return pid

    def _advice(self) -> str:
        return (
            f"The threshold is {self.usage_threshold}: set {ENV_THRESHOLD} to change it, "
            f"{ENV_REFRESH_MS}=0 turns the monitor off. To use less memory, run fewer tasks "
            "at once (ask for more CPUs per task), or give tasks max_retries so that a "
            "killed one runs again."
        )

    def _error_message(self, usage: MemoryUsage) -> str:
        return (
            "the worker running this task was killed by the memory monitor because the node "
            f"was out of memory: {usage} in use, above the threshold. {self._advice()}"
        )

    def _log_message(self, victim: dict[str, Any], usage: MemoryUsage) -> str:
        pid = victim["pid"]
        try:
            rss = f", using {psutil.Process(pid).memory_info().rss / _GB:.2f} GB"
        except (psutil.Error, OSError):
            rss = ""
        if victim["retriable"]:
            why, then = "the most recently started retriable task", "it will be retried"
        else:
            why = "the most recently started task; none running could be retried"
            then = "the call fails" if victim["actor_task"] else "its get raises OutOfMemoryError"
        kind = "actor task" if victim["actor_task"] else "task"
        return (
            f"memory monitor: node memory {usage} is above the threshold "
            f"{self.usage_threshold}; killed worker pid={pid}{rss}, running {kind} "
            f"{victim['task_id'].hex()} ({why}): {then}. {self._advice()}"
        )
