"""Policy serving: ``get_action`` requests per second from 1 and 8 client processes, for
rayfield-rllib's ``PolicyServerInput`` next to RLlib's.

    python bench_serving.py [--rounds 3] [--seconds 4] [--clients 1,8] [--only rayfield|rllib]
                            [--inference-mode remote|local] [--max-queued-batches N]
                            [--rllib-path DIR] [--baseline CHECKOUT]

Each library runs one server process (a PPO trainer whose ``input`` is its
``PolicyServerInput``, written as the library's CartPole server example; it trains on
what the clients send) and 8 client processes that play CartPole with
``inference_mode="remote"`` (default) or ``"local"`` (``--inference-mode``; see
``_bench_serving_peers.py``). All start once, before the
rounds (start-up is not measured). In each round every (library, client count) pair gets
a window of ``--seconds`` during which the first N clients of that library play and count
their ``get_action`` calls (the other requests of an episode, ``start_episode``,
``log_returns`` and ``end_episode``, are made as well and counted apart); the libraries
take turns, their order swapped every round, so a change in the machine's load falls on
both. Each window also gives the CPU time per ``get_action``: of the server process (all
its threads: serving and the training it does meanwhile; RLlib's Ray daemons, other
processes, are not counted) and of the clients (their own processes). The table gives the
median over the rounds and the spread (lowest-highest), the ratio of the medians and the
load average; the machine's CPU count is printed first.

RLlib's ``PolicyServerInput`` left RLlib in 2.50 (2.60, the version the other benchmarks
use, has only ``PolicyClient``), and from 2.39 on its inference worker refuses the
``ExternalEnv`` it samples (2.39-2.49 build every sampler with the connector API, which
raises "Policies using the new Connector API do not support ExternalEnv"). So this
benchmark runs RLlib 2.38.0, the last release where it serves, on its old API stack with
``enable_connectors=False`` as RLlib's own CartPole server example of that time did. It is
imported from a directory given by ``--rllib-path`` or ``$RAYFIELD_BENCH_RLLIB_PATH``,
default ``build/bench-rllib-2.38`` at the repository root, which ``nox -s bench`` fills
(``pip install --no-deps --target DIR ray==2.38.0 typer shellingham annotated-doc``: its
other dependencies are those of the ray 2.60 install). When it is not found only
rayfield-rllib runs. Target: at least 3x RLlib's requests/s.

``--baseline CHECKOUT`` adds a third contender, ``rayfield@base``: rayfield-rllib imported
from another checkout's ``packages/*/src`` (e.g. ``git archive main packages | tar -x -C
DIR``, with the store's built ``_native.abi3.so`` copied beside its sources), in the same
alternating rounds, for a before/after comparison of a change under the same load.

On the shared 2-core development machine other jobs can put the load average far above 2;
the figures then vary several-fold between rounds (hence the alternating rounds, the
spread and the load printed with each window).

Backpressure: rayfield's ``PolicyServerInput`` holds at most ``max_queued_batches`` (16)
batches for the trainer and then makes its clients wait, RLlib's queue grows without bound.
When the clients outpace the trainer (here, at a few hundred steps per second), rayfield's
clients are held to the trainer's pace; ``--max-queued-batches N`` sets rayfield's bound
(e.g. 100000: no bound in practice, as RLlib).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PEERS = HERE / "_bench_serving_peers.py"
DEFAULT_RLLIB_PATH = ROOT / "build" / "bench-rllib-2.38"
TARGET = 3.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def rllib_env(path: Path) -> dict[str, str] | None:
    """The environment that imports RLlib's PolicyServerInput from `path`, or None."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), env.get("PYTHONPATH")) if p)
    env["PYTHONWARNINGS"] = "ignore"
    probe = [sys.executable, "-c", "import ray.rllib.env.policy_server_input"]
    ok = subprocess.run(probe, env=env, capture_output=True).returncode == 0
    return env if ok else None


class Proc:
    """A child process (its own session, so its children end with it) read line by line."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log.open("w")
        self.p = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )

    def readline(self) -> str:
        assert self.p.stdout is not None
        return self.p.stdout.readline()

    def wait_ready(self, what: str) -> None:
        line = self.readline()
        while line and line.strip() != "READY":
            line = self.readline()
        if not line:
            raise RuntimeError(f"{what} ended before it was ready (see {self.log.name})")

    def send(self, line: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def stop(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
                self.p.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(10)
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid` so far, all its threads (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(
    lib: str,
    env: dict[str, str],
    n: int,
    seconds: float,
    logs: Path,
    mode: str,
    max_queued: int | None = None,
) -> list[Proc]:
    """The server (first) and `n` clients of `lib` (``rayfield@base``: rayfield's peers
    with `env`'s sources), all ready."""
    port = free_port()
    peer = "rayfield" if lib.startswith("rayfield") else "rllib"
    argv = [sys.executable, str(PEERS), "server", peer, str(port)]
    if peer == "rayfield" and max_queued is not None:
        argv.append(str(max_queued))
    server = Proc(argv, env, logs / f"{lib}-server.log")
    procs = [server]
    try:
        server.wait_ready(f"the {lib} server")
        for i in range(n):
            argv = [
                sys.executable,
                str(PEERS),
                "client",
                peer,
                str(port),
                str(seconds),
                str(1000 * i),
                mode,
            ]
            procs.append(Proc(argv, env, logs / f"{lib}-client{i}.log"))
        for i, c in enumerate(procs[1:]):
            c.wait_ready(f"{lib} client {i}")
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


def window(server: Proc, clients: list[Proc], seconds: float) -> dict[str, float]:
    """One measured window of `clients`: get_action and all requests per second, and
    the CPU ms per get_action of the server process and of the clients."""
    at = time.time() + 0.5
    for c in clients:
        c.send(repr(at))
    time.sleep(max(0.0, at - time.time()))
    cpu = cpu_seconds(server.p.pid)
    time.sleep(max(0.0, at + seconds - time.time()))
    server_cpu = cpu_seconds(server.p.pid) - cpu
    totals = {"get_action": 0.0, "requests": 0.0, "client_cpu": 0.0}
    for c in clients:
        counts = json.loads(c.readline())
        totals["get_action"] += counts["get_action"] / seconds
        totals["requests"] += counts["requests"] / seconds
        totals["client_cpu"] += counts["cpu_s"]
    calls = max(1.0, totals["get_action"] * seconds)
    totals["server_ms"] = 1000 * server_cpu / calls
    totals["client_ms"] = 1000 * totals.pop("client_cpu") / calls
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", default="1,8", help="client counts, comma-separated")
    parser.add_argument("--only", choices=["rayfield", "rllib"])
    parser.add_argument("--inference-mode", choices=["remote", "local"], default="remote")
    parser.add_argument("--max-queued-batches", type=int, default=None)
    parser.add_argument("--rllib-path", type=Path, default=None)
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a checkout whose rayfield runs as rayfield@base",
    )
    args = parser.parse_args()
    counts = [int(x) for x in args.clients.split(",")]
    rllib_path = args.rllib_path or Path(
        os.environ.get("RAYFIELD_BENCH_RLLIB_PATH", DEFAULT_RLLIB_PATH)
    )
    libs: dict[str, dict[str, str]] = {}
    if args.only != "rllib":
        libs["rayfield"] = dict(os.environ)
    if args.only != "rayfield":
        env = rllib_env(rllib_path)
        if env is None:
            print(
                f"RLlib's PolicyServerInput (ray 2.38.0) is not in {rllib_path}: "
                "rayfield-rllib only (see the docstring to install it)"
            )
        else:
            libs["rllib"] = env
    if args.baseline is not None and args.only != "rllib":
        srcs = sorted(str(p) for p in args.baseline.resolve().glob("packages/*/src"))
        if not srcs:
            parser.error(f"--baseline {args.baseline}: no packages/*/src there")
        libs["rayfield@base"] = {**os.environ, "PYTHONPATH": os.pathsep.join(srcs)}
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    queued = args.max_queued_batches
    print(
        f"{args.inference_mode} inference; rayfield's max_queued_batches: "
        f"{'16 (the default)' if queued is None else queued}, RLlib's queue: no bound"
    )
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-serving-{os.getpid()}"
    logs.mkdir(mode=0o700, exist_ok=True)
    procs: dict[str, list[Proc]] = {}
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    t0 = time.time()
    try:
        for lib, env in libs.items():
            procs[lib] = start(
                lib,
                env,
                max(counts),
                args.seconds,
                logs,
                args.inference_mode,
                args.max_queued_batches,
            )
        print(f"servers and clients started in {time.time() - t0:.0f} s (not measured)")
        order = list(libs)
        for r in range(args.rounds):
            for lib in order if r % 2 == 0 else order[::-1]:
                for n in counts:
                    res = window(procs[lib][0], procs[lib][1 : 1 + n], args.seconds)
                    results.setdefault((lib, n), []).append(res)
                    print(
                        f"round {r + 1} {lib:13s} {n} client(s): {res['get_action']:7.0f} "
                        f"get_action/s ({res['requests']:.0f} calls/s), CPU ms/get_action: "
                        f"server {res['server_ms']:.2f}, clients {res['client_ms']:.2f}; "
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        for plist in procs.values():
            for p in plist:
                p.stop()
    print(
        f"\nget_action requests/s ({args.inference_mode} inference), median (lowest-highest) "
        f"over {args.rounds} rounds; median CPU ms per get_action, server / clients"
    )
    for n in counts:
        medians = {}
        for lib in libs:
            rows = results.get((lib, n), [])
            if not rows:
                continue
            vals = [x["get_action"] for x in rows]
            medians[lib] = statistics.median(vals)
            server_ms = statistics.median(x["server_ms"] for x in rows)
            client_ms = statistics.median(x["client_ms"] for x in rows)
            print(
                f"  {n} client(s)  {lib:13s} {medians[lib]:7.0f}  ({min(vals):.0f}-{max(vals):.0f})"
                f"  CPU ms {server_ms:.2f} / {client_ms:.2f}"
            )
        if medians.get("rayfield") and medians.get("rllib"):
            ratio = medians["rayfield"] / medians["rllib"]
            verdict = "met" if ratio >= TARGET else "NOT met"
            print(
                f"  {n} client(s)  rayfield / RLlib: {ratio:.1f}x (target {TARGET:.0f}x: {verdict})"
            )
        if medians.get("rayfield") and medians.get("rayfield@base"):
            ratio = medians["rayfield"] / medians["rayfield@base"]
            print(f"  {n} client(s)  rayfield / rayfield@base: {ratio:.2f}x")
    avg = os.getloadavg()
    print(f"load average at the end: {avg[0]:.1f} / {avg[1]:.1f} / {avg[2]:.1f} (1/5/15 min)")
    print(f"total {time.time() - t0:.0f} s; logs in {logs}")


if __name__ == "__main__":
    main()
