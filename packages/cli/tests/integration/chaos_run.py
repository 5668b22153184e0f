"""One chaos run on two nodes of one CPU: killed workers, a killed and replaced node.

The run (issue 27's): a head and a second node of one CPU each; 2,000 tasks with
``max_retries=10`` and 4 actors with ``max_restarts=-1, max_task_retries=-1`` taking
``calls`` calls each, made in waves of a tenth of them ``wave_gap_s`` apart, so that
once the first waves are answered through the nodes the later ones go direct to the
actors' workers (``direct_calls.py``) and the kills break those connections too.
Meanwhile a worker process is SIGKILLed every ``kill_every_s`` seconds for ``chaos_s``
seconds, and the second node is SIGKILLed once ``node_kill_at_s`` in and replaced by a
new one. Afterwards every task result and every actor call must
have arrived, correct: a task is finished, retried or failed with an error, never
forgotten. A run that does not finish within ``deadline_s`` is a hang; its report holds
what was left unfinished and what the cluster showed (``rayfield status``).

Run it directly to repeat it: ``python chaos_run.py --runs 20`` (exits 1 on any lost work
or hang); ``test_chaos.py`` runs a short version.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from clusterutil import CLI, add_node, start_nodes  # noqa: E402

import rayfield as rf  # noqa: E402
from rayfield.util.cluster import rayfield_processes, stop_all  # noqa: E402


@rf.remote(max_retries=10)
def square(i: int) -> int:
    time.sleep(0.005)  # 2,000 of them keep two CPUs busy past the node's kill
    return i * i


@rf.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def add(self, v: int) -> int:
        self.calls += 1
        return v + 1


@dataclass
class Outcome:
    """What one run came to."""

    tasks_ok: int = 0
    tasks_lost: list[str] = field(default_factory=list)  # errors raised by task gets
    calls_ok: int = 0
    calls_lost: list[str] = field(default_factory=list)
    unfinished_tasks: int = 0
    unfinished_calls: int = 0
    hung: bool = False
    workers_killed: int = 0
    direct_calls: int = 0  # calls sent straight to an actor's worker
    seconds: float = 0.0
    status: str = ""

    @property
    def clean(self) -> bool:
        return not (self.hung or self.tasks_lost or self.calls_lost)

    def summary(self) -> str:
        head = "clean" if self.clean else ("HUNG" if self.hung else "LOST WORK")
        lines = [
            f"{head}: {self.tasks_ok}/2000 tasks, {self.calls_ok} actor calls ok, "
            f"{self.direct_calls} of them sent direct, {self.workers_killed} workers killed, "
            f"{self.seconds:.1f} s"
        ]
        if self.hung:
            lines.append(
                f"  unfinished: {self.unfinished_tasks} tasks, {self.unfinished_calls} calls"
            )
        lines += [f"  task lost: {e}" for e in self.tasks_lost[:5]]
        lines += [f"  call lost: {e}" for e in self.calls_lost[:5]]
        if self.status:
            lines.append("  " + self.status.replace("\n", "\n  "))
        return "\n".join(lines)


def _nodes(temp_dir: Path) -> dict[str, psutil.Process]:
    out = {}
    for p in rayfield_processes(temp_dir):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "rayfield._private.node_manager.node_main" in cmd:
            out[cmd[cmd.index("--session-dir") + 1]] = p
    return out


def _workers(temp_dir: Path) -> list[psutil.Process]:
    out = []
    for node in _nodes(temp_dir).values():
        try:
            out += [
                c
                for c in node.children(recursive=True)
                if "rayfield._private.runtime.worker_main" in " ".join(c.cmdline())
            ]
        except psutil.Error:
            continue
    return out


def run_once(
    temp_dir: Path,
    *,
    calls: int = 100,
    wave_gap_s: float = 0.3,
    kill_every_s: float = 0.3,
    chaos_s: float = 20.0,
    node_kill_at_s: float = 4.0,
    deadline_s: float = 180.0,
    seed: int = 0,
) -> Outcome:
    """One chaos run in a cluster started under ``temp_dir`` (stopped at the end)."""
    rng = random.Random(seed)
    out = Outcome()
    temp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    address = start_nodes(
        temp_dir, count=2, resources="{}", head_args=("--heartbeat-timeout-s", "1.5")
    )
    head_session = str((temp_dir / "session_latest").resolve())
    rf.init(address=address, temp_dir=str(temp_dir))
    start = time.monotonic()
    stop = threading.Event()
    try:
        actors = [Counter.remote() for _ in range(4)]
        refs = [square.remote(i) for i in range(2000)]
        call_refs = []

        def chaos() -> None:
            begin = time.monotonic()
            node_killed = False
            while not stop.is_set() and time.monotonic() - begin < chaos_s:
                workers = _workers(temp_dir)
                if workers:
                    victim = rng.choice(workers)
                    try:
                        victim.send_signal(signal.SIGKILL)
                        out.workers_killed += 1
                    except psutil.Error:
                        pass
                if not node_killed and time.monotonic() - begin >= node_kill_at_s:
                    node_killed = True
                    others = [p for s, p in _nodes(temp_dir).items() if s != head_session]
                    for p in others:
                        p.send_signal(signal.SIGKILL)
                    add_node(address, temp_dir, "{}")
                stop.wait(kill_every_s)

        killer = threading.Thread(target=chaos, daemon=True)
        killer.start()
        wave = max(1, calls // 10)
        for first in range(0, calls, wave):
            for _ in range(min(wave, calls - first)):
                call_refs += [a.add.remote(1) for a in actors]
            stop.wait(wave_gap_s)  # the pace of the calls, not a wait for anything
        out.direct_calls = sum(a._direct.plan.direct_calls for a in actors if a._direct)
        deadline = start + deadline_s
        pending = {r: ("task", i) for i, r in enumerate(refs)}
        pending.update({r: ("call", i) for i, r in enumerate(call_refs)})
        while pending and time.monotonic() < deadline:
            ready, _ = rf.wait(list(pending), num_returns=len(pending), timeout=1.0)
            for r in ready:
                kind, i = pending.pop(r)
                try:
                    value = rf.get(r, timeout=10)
                except Exception as exc:  # lost: the error says why
                    (out.tasks_lost if kind == "task" else out.calls_lost).append(
                        f"{kind} {i}: {type(exc).__name__}: {str(exc)[:200]}"
                    )
                    continue
                if kind == "task":
                    if value == i * i:
                        out.tasks_ok += 1
                    else:
                        out.tasks_lost.append(f"task {i}: wrong result {value!r}")
                elif value == 2:
                    out.calls_ok += 1
                else:
                    out.calls_lost.append(f"call {i}: wrong result {value!r}")
        if pending:
            out.hung = True
            out.unfinished_tasks = sum(1 for k, _ in pending.values() if k == "task")
            out.unfinished_calls = len(pending) - out.unfinished_tasks
            status = subprocess.run(
                [*CLI, "status", "--temp-dir", str(temp_dir)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            out.status = status.stdout + status.stderr
        stop.set()
        killer.join(timeout=30)
    finally:
        out.seconds = time.monotonic() - start
        stop.set()
        rf.shutdown()
        stop_all(5.0, temp_dir=temp_dir)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--chaos-s", type=float, default=20.0)
    parser.add_argument("--deadline-s", type=float, default=180.0)
    args = parser.parse_args(argv)
    bad = 0
    for n in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="rf-chaos-") as d:
            outcome = run_once(
                Path(d),
                calls=args.calls,
                chaos_s=args.chaos_s,
                deadline_s=args.deadline_s,
                seed=n,
            )
        print(f"run {n + 1}/{args.runs}: {outcome.summary()}", flush=True)
        bad += not outcome.clean
    print(f"{args.runs - bad} of {args.runs} runs clean", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
