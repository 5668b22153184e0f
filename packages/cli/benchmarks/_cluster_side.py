"""One system on a two-node cluster: ``_cluster_side.py rayfield|ray --temp-dir D --marker M``.

Run by ``bench_cluster.py`` in a fresh process per system, with that system's
interpreter. It starts a head (1 CPU) and a second node (1 CPU and
``{"node2": 1000}``) on this machine with the system's own command line, connects
this process as the driver (on the head), runs the rows and stops the cluster.

Every process the cluster commands start carries ``XBENCH_CLUSTER=M`` in its
environment, and only processes of this user with that mark are ever stopped
(:func:`sweep`), so other users' and other benchmarks' clusters are left alone;
``ray stop`` is never called (it stops every Ray process of the user).

Options: ``--quick``; ``--rows a,b`` runs only those rows; ``--stop`` only stops
what a previous run with the same ``--temp-dir`` and ``--marker`` left running;
``--head-ip IP --netns node2=NS@IP,node3=NS@IP,...`` puts the head and the driver on
``IP`` (a bridge's address) and each named node inside that network namespace at its own
address (see :class:`Placement`; the namespaces are made by ``bench_cluster.py --net
netns``). The start row checks that every node advertises the address it was given.
``--row-timeout S`` (default 120, the parent's): the broadcast row times fewer than 3
calls (at least 1) when its untimed call says that 3 would not end within twice that;
each of its calls restarts the parent's timeout (``progress``).
Every figure goes to stdout as one ``BENCH_RESULT {json}`` line (see ``_common``).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "benchmarks"))
from _common import (
    DONE_MARKER,
    GB,
    emit,
    flag,
    progress,
    run_row,
    selected,
    tree_cpu_s,
)

MARK = "XBENCH_CLUSTER"
NODE2 = "node2"
ARRAY_BYTES = 200_000_000  # 25,000,000 float64
STORE_BYTES = 2_000_000_000  # object store of each node
ROWS: list[tuple[str, str, str]] = [
    ("cluster_start_s", "two-node cluster start + driver connect", "s"),
    ("pull_to_driver_gbps", "200 MB made on node 2, get on the driver", "GB/s"),
    ("push_to_node2_gbps", "200 MB put on the driver, read on node 2", "GB/s"),
    ("spillback_tasks", "1,000 no-op tasks spilled to node 2", "/s"),
    ("spillback_tasks_10k", "10,000 no-op tasks spilled to node 2", "/s"),
    ("actor_calls_node2", "1,000 calls from the driver to an actor on node 2", "/s"),
    ("broadcast_nodes_s", "three more nodes started (for the broadcast)", "s"),
    ("broadcast_gbps", "1 GB put on the driver, read on 4 other nodes", "GB/s"),
]
BROADCAST_BYTES = 1_000_000_000  # 125,000,000 float64
BROADCAST_NODES = ("node3", "node4", "node5")  # started for the broadcast row, with node 2
# timed calls per row, after one untimed
# (the 10,000-task row times 3 calls in either run: 5 would take minutes on a loaded machine)
_QUICK = {"repeats": 3, "tasks": 1000, "many_tasks": 10_000, "many_repeats": 3, "calls": 1000}
_FULL = {"repeats": 5, "tasks": 1000, "many_tasks": 10_000, "many_repeats": 3, "calls": 1000}


# ---- starting and stopping a cluster ---------------------------------------------------


def _run(cmd: list[str], env: dict[str, str], timeout_s: float = 120) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {proc.returncode}: {' | '.join(tail)}")
    return proc.stdout


def _ray_cli() -> list[str]:
    script = Path(sys.executable).parent / "ray"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


@dataclass(frozen=True)
class Placement:
    """Where each node runs: the head (and the driver) at ``head_ip`` in this network
    namespace; a node named in ``hosts`` (``node2``, ``node3``, ...) inside the network
    namespace ``hosts[name][0]`` at address ``hosts[name][1]`` (made by
    ``tools/netns_bridge.py``), any other on ``head_ip`` next to the head."""

    head_ip: str = "127.0.0.1"
    hosts: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def from_argv(cls, argv: list[str]) -> Placement:
        """From ``--head-ip IP`` and ``--netns name=namespace@ip,...`` (both optional)."""
        head_ip = argv[argv.index("--head-ip") + 1] if "--head-ip" in argv else "127.0.0.1"
        hosts = {}
        if "--netns" in argv:
            for item in argv[argv.index("--netns") + 1].split(","):
                name, _, where = item.partition("=")
                ns, _, ip = where.partition("@")
                hosts[name] = (ns, ip)
        return cls(head_ip, hosts)

    def ip(self, name: str) -> str:
        return self.hosts[name][1] if name in self.hosts else self.head_ip

    def prefix(self, name: str) -> list[str]:
        """The argv prefix that runs a command where node ``name`` lives."""
        return ["ip", "netns", "exec", self.hosts[name][0]] if name in self.hosts else []


def _start_node(
    system: str,
    address: str,
    temp_dir: Path,
    marker: str,
    name: str,
    place: Placement,
) -> None:
    """Start node ``name`` (1 CPU, ``{name: 1000}``) in the cluster at ``address``, where
    ``place`` puts it. A node in a namespace is started as on another host: at its own
    address, and (rayfield) with a temp dir of its own and the token in ``RAYFIELD_TOKEN``."""
    env = {**os.environ, MARK: marker}
    common = ["--num-cpus", "1", "--object-store-memory", str(STORE_BYTES)]
    common += ["--resources", json.dumps({name: 1000}), "--node-ip-address", place.ip(name)]
    if system == "rayfield":
        node_dir = temp_dir
        if name in place.hosts:
            node_dir = temp_dir / name
            node_dir.mkdir(mode=0o700, exist_ok=True)
            env["RAYFIELD_TOKEN"] = (temp_dir / "session_latest" / "token").read_text().strip()
        cli = [sys.executable, "-m", "rayfield.cli.main", "start", "--address", address]
        _run([*place.prefix(name), *cli, *common, "--temp-dir", str(node_dir)], env)
    else:
        cli = [*_ray_cli(), "start", "--disable-usage-stats", "--address", address]
        _run([*place.prefix(name), *cli, *common, "--temp-dir", str(temp_dir)], env)


def start_cluster(system: str, temp_dir: Path, marker: str, place: Placement) -> str:
    """Start the head and node 2 under ``temp_dir``; the head's GCS address."""
    env = {**os.environ, MARK: marker}
    common = ["--num-cpus", "1", "--object-store-memory", str(STORE_BYTES)]
    common += ["--node-ip-address", place.head_ip, "--temp-dir", str(temp_dir)]
    if system == "rayfield":
        cli = [sys.executable, "-m", "rayfield.cli.main", "start"]
        _run([*cli, "--head", "--port", "0", *common], env)
        cluster = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())
        address = str(cluster["gcs_address"])
    else:
        cli = [*_ray_cli(), "start", "--disable-usage-stats"]
        _run([*cli, "--head", "--port", "0", "--include-dashboard", "false", *common], env)
        address = (temp_dir / "ray_current_cluster").read_text().strip()
    _start_node(system, address, temp_dir, marker, NODE2, place)
    return address


def add_nodes(
    system: str, address: str, temp_dir: Path, marker: str, names: Any, place: Placement
) -> None:
    """Start one more node (1 CPU, ``{name: 1000}``) per name in the cluster at ``address``."""
    for name in names:
        _start_node(system, address, temp_dir, marker, name, place)


def node_addresses(rf: Any) -> dict[str, str]:
    """The address each alive node advertises (``nodes()``), by its custom resource
    (``node2``...; ``head`` for the node without one)."""
    out = {}
    for n in rf.nodes():
        if not n.get("Alive", n.get("alive")):
            continue
        names = [k for k in n.get("Resources", {}) if k.startswith("node") and k[4:].isdigit()]
        out[names[0] if names else "head"] = str(n["NodeManagerAddress"])
    return out


def check_addresses(rf: Any, place: Placement, names: Any) -> dict[str, str]:
    """The nodes' advertised addresses. With nodes in namespaces, raises RuntimeError when
    the head or one of ``names`` advertises another address than ``place`` gave it
    (loopback, say). On loopback nothing is checked: Ray advertises the machine's own
    address for ``--node-ip-address 127.0.0.1`` (its ``resolve_ip_for_localhost``),
    which the kernel also delivers over the loopback interface."""
    found = node_addresses(rf)
    if not place.hosts:
        return found
    for name in ("head", *names):
        want = place.head_ip if name == "head" else place.ip(name)
        if found.get(name) != want:
            raise RuntimeError(f"{name} advertises {found.get(name)}, not {want}: {found}")
    return found


def peak_anon_bytes(marker: str, stop: Any, out: dict[int, int]) -> None:
    """Until ``stop`` is set, record in ``out`` the largest ``RssAnon`` (private memory,
    the shared store left out) seen of each process marked ``marker``, every 50 ms."""
    while not stop.wait(0.05):
        for pid in _marked(marker):
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            kb = int(line.split()[1])
                            out[pid] = max(out.get(pid, 0), kb * 1024)
            except (OSError, ValueError):
                continue


def _process_name(pid: int) -> str:
    """The first two words of ``pid``'s command line ("?" when gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    return " ".join(Path(w.decode(errors="replace")).name for w in words[:2] if w)


def _marked(marker: str) -> list[int]:
    """Pids of this user's processes whose environment holds ``XBENCH_CLUSTER=marker``."""
    needle = f"{MARK}={marker}".encode()
    me, found = os.getuid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != me:
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:  # gone, or not readable
            continue
    return found


def sweep(marker: str, grace_s: float = 8.0) -> int:
    """SIGTERM every process marked ``marker``, SIGKILL what outlives ``grace_s``; how many."""
    pids = _marked(marker)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + (grace_s if sig == signal.SIGTERM else 2.0)
        while pids and time.monotonic() < end:
            time.sleep(0.2)
            pids = [p for p in pids if p in set(_marked(marker))]
        if not pids:
            break
    return len(pids)


def stop_cluster(system: str, temp_dir: Path, marker: str) -> None:
    """Stop the cluster started under ``temp_dir`` (and the temp dirs of its nodes in
    namespaces, ``temp_dir/node*``): gracefully, then by its mark."""
    if system == "rayfield":
        for d in [temp_dir, *sorted(temp_dir.glob("node*"))]:
            cmd = [sys.executable, "-m", "rayfield.cli.main", "stop", "--temp-dir", str(d)]
            try:
                subprocess.run(cmd, capture_output=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass
    sweep(marker)


# ---- the rows --------------------------------------------------------------------------


def _cpu_by_pid(marker: str) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each process of the driver's tree and
    of the cluster (those marked ``marker``: nodes, GCS, workers), by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict(tree_cpu_s())
    for pid in _marked(marker):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


def _cpu_since(before: dict[int, float], marker: str) -> float:
    """CPU seconds used since ``before`` (a :func:`_cpu_by_pid`) by the processes alive
    now: a process that ended in between takes only its CPU out of the sum (it is not
    counted since its last sample), not what it used before."""
    now = _cpu_by_pid(marker)
    return sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in now.items())


def _median_rate(
    once: Any, repeats: int, unit: float, marker: str, budget_s: float | None = None
) -> dict[str, Any]:
    """Call ``once`` (returns (work, seconds)) once untimed, then ``repeats`` times; with
    ``budget_s``, fewer (at least one) when the untimed call's wall time says that
    ``repeats`` more would not end within ``budget_s`` of the start.

    Returns:
        ``rate``: the median of work / seconds / ``unit`` over the timed calls; ``best``,
        ``worst``, ``seconds``, ``repeats``; ``cpu_us_per_op``: CPU time of the driver
        and of every cluster process during the timed calls (their whole wall time, not
        only the measured part) over the work done, in microseconds per ``unit``.
    """
    t0 = time.perf_counter()
    once()
    first_s = time.perf_counter() - t0
    if budget_s is not None:
        repeats = max(1, min(repeats, int(budget_s / first_s) - 1))
    cpu0 = _cpu_by_pid(marker)
    samples = [once() for _ in range(repeats)]
    cpu = _cpu_since(cpu0, marker)
    rates = [w / s / unit for w, s in samples]
    return {
        "rate": statistics.median(rates),
        "best": max(rates),
        "worst": min(rates),
        "seconds": [s for _, s in samples],
        "repeats": repeats,
        "cpu_us_per_op": 1e6 * cpu / (sum(w for w, _ in samples) / unit),
    }


def build(rf: Any, p: dict[str, Any], marker: str, more_nodes: Any = None) -> dict[str, Any]:
    """The rows' bodies for the module ``rf`` (``rayfield`` or ``ray``, connected);
    ``more_nodes()`` starts the broadcast's extra nodes (a row of its own, so that the
    broadcast row's timeout covers only its transfers) and returns the nodes' addresses."""
    import numpy as np

    n = ARRAY_BYTES // 8
    on_node2: dict[str, Any] = {"resources": {NODE2: 1}}

    def node_id() -> str:
        return str(rf.get_runtime_context().get_node_id())

    # Two returns: the array and a small flag, so the driver learns that the task is
    # done by getting the flag, without pulling the array (a ``wait`` might).
    @rf.remote(num_returns=2, **on_node2)
    def make(seed: int) -> tuple[Any, str]:
        return np.full(n, float(seed)), node_id()

    @rf.remote(**on_node2)
    def total(a: Any) -> tuple[float, str]:
        return float(a.sum()), node_id()

    @rf.remote(**on_node2)
    def noop() -> None:
        return None

    # num_cpus=0: in Ray an actor that names any resource also holds 1 CPU for its
    # lifetime, which would keep node 2's only CPU from the broadcast's reader there.
    @rf.remote(num_cpus=0, **on_node2)
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def add(self) -> int:
            self.n += 1
            return self.n

        def where(self) -> str:
            return node_id()

    driver_node = node_id()

    def check_node(where: str) -> None:
        if where == driver_node:
            raise RuntimeError("the node-2 task ran on the driver's node: nothing crossed")

    def pull_once(seed: list[int] = [0]) -> tuple[int, float]:  # noqa: B006
        seed[0] += 1
        big, where = make.remote(seed[0])
        check_node(rf.get(where))
        t0 = time.perf_counter()
        a = rf.get(big)
        dt = time.perf_counter() - t0
        if a.nbytes != ARRAY_BYTES or a[-1] != seed[0]:
            raise RuntimeError(f"got {a.nbytes} bytes ending in {a[-1]}")
        del a, big
        return ARRAY_BYTES, dt

    def push_once(seed: list[int] = [0]) -> tuple[int, float]:  # noqa: B006
        seed[0] += 1
        ref = rf.put(np.full(n, float(seed[0])))
        t0 = time.perf_counter()
        s, where = rf.get(total.remote(ref))
        dt = time.perf_counter() - t0
        check_node(where)
        if s != seed[0] * n:
            raise RuntimeError(f"node 2 summed {s}, not {seed[0] * n}")
        del ref
        return ARRAY_BYTES, dt

    def spill_once(n: int) -> tuple[int, float]:
        t0 = time.perf_counter()
        rf.get([noop.remote() for _ in range(n)])
        return n, time.perf_counter() - t0

    actor: list[Any] = []

    def calls_once() -> tuple[int, float]:
        if not actor:  # made in the untimed first call
            actor.append(Counter.remote())
            check_node(rf.get(actor[0].where.remote()))
        a, n = actor[0], p["calls"]
        start = rf.get(a.add.remote())
        t0 = time.perf_counter()
        last = rf.get([a.add.remote() for _ in range(n)])[-1]
        dt = time.perf_counter() - t0
        if last != start + n:
            raise RuntimeError(f"the actor counted to {last}, not {start + n}")
        return n, dt

    def calls_row() -> dict[str, Any]:
        out = _median_rate(calls_once, p["repeats"], 1, marker)
        # rayfield: how many went straight to the actor's worker (the rest via the nodes)
        direct = getattr(actor[0], "_direct", None) if actor else None
        if direct is not None:
            out["direct_calls"] = direct.plan.direct_calls
        return out

    readers = [
        rf.remote(resources={name: 1})(lambda a: (float(a[0] + a[-1]), node_id()))
        for name in (NODE2, *BROADCAST_NODES)
    ]

    def broadcast_once(seed: list[int] = [0]) -> tuple[int, float]:  # noqa: B006
        seed[0] += 1
        ref = rf.put(np.full(BROADCAST_BYTES // 8, float(seed[0])))
        t0 = time.perf_counter()
        got = rf.get([r.remote(ref) for r in readers])
        dt = time.perf_counter() - t0
        where = {w for _, w in got}
        if len(where) != len(readers) or driver_node in where:
            raise RuntimeError(f"the readers ran on {len(where)} nodes, the driver's among them?")
        if any(v != 2 * seed[0] for v, _ in got):
            raise RuntimeError(f"read {[v for v, _ in got]}, not {2 * seed[0]} each")
        del ref
        return len(readers) * BROADCAST_BYTES, dt

    more: dict[str, Any] = {}

    def start_more() -> dict[str, Any]:
        """Start the broadcast's nodes 3-5 (once): seconds, their advertised addresses."""
        if more:
            raise RuntimeError("the broadcast's nodes were started before (or failed to)")
        more["tried"] = True
        t0 = time.perf_counter()
        found = more_nodes() if more_nodes is not None else {}
        more["addresses"] = found
        return {"value": time.perf_counter() - t0, "node_addresses": found}

    def broadcast() -> dict[str, Any]:
        import threading

        row_t0 = time.perf_counter()
        if not more:  # the row run alone (--rows broadcast_gbps): start the nodes here
            start_more()
        if "addresses" not in more:
            raise RuntimeError("not run: the broadcast's nodes did not start")
        peaks: dict[int, int] = {}
        stop = threading.Event()
        sampler = threading.Thread(target=peak_anon_bytes, args=(marker, stop, peaks))
        sampler.start()
        # Each call tells the parent that it ended (the row's timeout, one call's here:
        # Ray takes 15-60 s a call on a loaded 2-core machine); 3 timed calls, or fewer
        # (at least 1) where the untimed one says 3 would not end within twice the timeout.
        budget_s = 2 * p["row_timeout_s"] - (time.perf_counter() - row_t0)

        def once_then_progress() -> tuple[int, float]:
            done = broadcast_once()
            progress()
            return done

        try:
            out = _median_rate(once_then_progress, min(3, p["repeats"]), GB, marker, budget_s)
        finally:
            stop.set()
            sampler.join()
        out["peak_private_mb"] = max(peaks.values(), default=0) / 1e6
        if peaks:
            out["peak_private_process"] = _process_name(max(peaks, key=lambda q: peaks[q]))
        out["node_addresses"] = more["addresses"]
        return out

    return {
        "pull_to_driver_gbps": lambda: _median_rate(pull_once, p["repeats"], GB, marker),
        "push_to_node2_gbps": lambda: _median_rate(push_once, p["repeats"], GB, marker),
        "spillback_tasks": lambda: _median_rate(
            lambda: spill_once(p["tasks"]), p["repeats"], 1, marker
        ),
        "spillback_tasks_10k": lambda: _median_rate(
            lambda: spill_once(p["many_tasks"]), p["many_repeats"], 1, marker
        ),
        "actor_calls_node2": calls_row,
        "broadcast_nodes_s": start_more,
        "broadcast_gbps": broadcast,
    }


def main() -> int:
    system = sys.argv[1]
    temp_dir = Path(sys.argv[sys.argv.index("--temp-dir") + 1])
    marker = sys.argv[sys.argv.index("--marker") + 1]
    if flag("--stop"):
        stop_cluster(system, temp_dir, marker)
        return 0
    if system == "ray":
        # A token in ~/.ray makes a head require it while joining nodes do not send it
        # (Ray 2.5x); on loopback the benchmark runs without authentication.
        os.environ["RAY_AUTH_MODE"] = "disabled"
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    p = dict(_QUICK if flag("--quick") else _FULL)
    timeout_at = sys.argv.index("--row-timeout") + 1 if "--row-timeout" in sys.argv else 0
    p["row_timeout_s"] = float(sys.argv[timeout_at]) if timeout_at else 120.0
    try:
        rf = importlib.import_module(system)
        importlib.import_module("numpy")
    except ImportError as exc:
        emit("import", error=f"{system} not installed ({exc})")
        return 0
    emit("version", value=getattr(rf, "__version__", "?"))
    sweep(marker)  # what a hung earlier attempt left
    place = Placement.from_argv(sys.argv)
    connected: list[bool] = []
    addresses: list[str] = []

    def start() -> dict[str, Any]:
        t0 = time.perf_counter()
        address = start_cluster(system, temp_dir, marker, place)
        addresses.append(address)
        if system == "ray":
            rf.init(address=address, _node_ip_address=place.head_ip, log_to_driver=False)
        else:
            rf.init(address=address, temp_dir=str(temp_dir))
        connected.append(True)
        dt = time.perf_counter() - t0
        return {"value": dt, "node_addresses": check_addresses(rf, place, [NODE2])}

    def more_nodes() -> dict[str, str]:
        add_nodes(system, addresses[0], temp_dir, marker, BROADCAST_NODES, place)
        return check_addresses(rf, place, [NODE2, *BROADCAST_NODES])

    try:
        run_row("cluster_start_s", start)
        keys = selected([k for k, _, _ in ROWS[1:]])
        if connected:
            bodies = build(rf, p, marker, more_nodes)
            for key in keys:
                run_row(key, bodies[key])
            rf.shutdown()
        else:
            for key in keys:
                emit(key, error="not run: the cluster did not start")
    finally:
        stop_cluster(system, temp_dir, marker)
    sys.stdout.write(DONE_MARKER + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
