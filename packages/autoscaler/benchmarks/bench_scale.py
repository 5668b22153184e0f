"""Scale-up and scale-down latency of a running cluster's autoscaler: rayfield's
``local_process`` provider against Ray's fake multi-node provider
(``ray.cluster_utils.AutoscalingCluster``), on this machine, in one run (see README.md).

Both clusters have a head without CPUs (Ray's started with ``ray start --head`` and the
fake provider's config, as ``AutoscalingCluster`` does, on a port of its own) and one
worker type of 1 CPU (at most 1 worker, none at first), the same autoscaler loop period
and idle timeout (rayfield's monitor also steps early when its 0.1 s poll of the GCS's
node records finds new demand; Ray's steps at its period only: each side as it ships).
Measured on each side:

- scale-up: from submitting one ``num_cpus=1`` task (it cannot run anywhere yet) to the
  task starting on the new worker (the task returns ``time.time()`` at its start);
- scale-down: from the task's result reaching the driver to the worker being gone
  (rayfield: the provider lists no worker; Ray: ``ray.nodes()`` has one alive node),
  which is the idle timeout plus the loop's delay and the node's stop.

Ray runs in its own interpreter (``--ray-python``, e.g. a venv with Ray 2.60), in a
subprocess that prints its figures as JSON; nothing of Ray is imported here.

    python bench_scale.py --ray-python /path/to/ray-venv/bin/python [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LOOP_S = 1  # the autoscaler's loop period on both sides (Ray's env var takes integers)
IDLE_TIMEOUT_MINUTES = 0.1  # 6 s on both sides
TIMEOUT_S = 300.0

RAY_SIDE = r"""
import json, os, shutil, signal, socket, subprocess, sys, tempfile, time
import ray
from ray._private.services import get_node_ip_address

# A fake multi-node cluster as ray.cluster_utils.AutoscalingCluster makes one, but on a
# port of its own and stopped by its own process ids: AutoscalingCluster runs
# `ray stop --force`, which would end every Ray process of the machine.
spec = json.load(sys.stdin)
with socket.socket() as s:
    s.bind(("", 0))
    port = s.getsockname()[1]
address = f"{get_node_ip_address()}:{port}"
empty = {k: [] for k in (
    "initialization_commands", "setup_commands", "head_setup_commands",
    "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands",
    "cluster_synced_files", "rsync_exclude", "rsync_filter")}
config = {
    **empty,
    "cluster_name": "bench", "max_workers": 1, "upscaling_speed": 1.0,
    "idle_timeout_minutes": spec["idle_timeout_minutes"],
    "provider": {"type": "fake_multinode", "use_node_id_as_ip": True,
                 "disable_node_updaters": True, "disable_launch_config_check": True,
                 "gcs_address": address},
    "auth": {"ssh_user": "ubuntu"}, "docker": {}, "file_mounts": {},
    "file_mounts_sync_continuously": False,
    "head_node_type": "ray.head.default",
    "available_node_types": {
        "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
        "worker": {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0,
                   "max_workers": 1},
    },
}
tmp = tempfile.mkdtemp(prefix="bench-ray-")
path = os.path.join(tmp, "cluster.json")
with open(path, "w") as f:
    json.dump(config, f)
env = {**os.environ, "AUTOSCALER_UPDATE_INTERVAL_S": str(spec["loop_s"]), "RAY_FAKE_CLUSTER": "1"}
os.environ["RAY_AUTH_MODE"] = env["RAY_AUTH_MODE"] = "disabled"  # the driver's and the head's
ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
head = subprocess.Popen(
    [ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=0",
     f"--autoscaling-config={path}", f"--temp-dir={tmp}/t", "--include-dashboard=false"],
    env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
try:
    deadline = time.time() + spec["timeout_s"]
    while True:  # the GCS listens
        try:
            socket.create_connection((address.split(":")[0], port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or head.poll() is not None:
                raise
            time.sleep(0.2)
    ray.init(address=address, logging_level="ERROR")

    @ray.remote(num_cpus=1)
    def first():
        return time.time()

    t0 = time.time()
    up = ray.get(first.remote(), timeout=spec["timeout_s"]) - t0
    t_end = time.time()
    deadline = t_end + spec["timeout_s"]
    while len([n for n in ray.nodes() if n["Alive"]]) > 1 and time.time() < deadline:
        time.sleep(0.1)
    down = time.time() - t_end
    print("RESULT " + json.dumps({"up_s": up, "down_s": down}), flush=True)
finally:
    ray.shutdown()
    try:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(30)
    except Exception:
        pass
    # the processes of this cluster that outlived the head: those naming its temp dir
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except (OSError, ValueError):
            continue
        if pid.isdigit() and tmp.encode() in cmd and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    shutil.rmtree(tmp, ignore_errors=True)
"""


def ray_side(python: str) -> dict[str, float]:
    """One scale-up and scale-down on Ray's fake multi-node cluster."""
    spec = {"idle_timeout_minutes": IDLE_TIMEOUT_MINUTES, "timeout_s": TIMEOUT_S, "loop_s": LOOP_S}
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [python, "-c", RAY_SIDE],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S * 3,
        check=False,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"Ray side failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def rayfield_config(workdir: Path, name: str) -> dict[str, Any]:
    """The prepared config of the rayfield side's cluster: a head with 0 CPUs, 0 to 1
    workers of 1 CPU, the idle timeout of both sides."""
    from rayfield.autoscaler.config import prepare_config

    return prepare_config(
        {
            "cluster_name": f"{name}-{os.getpid()}",
            "provider": {"type": "local_process", "cluster_dir": str(workdir / "cluster")},
            "max_workers": 1,
            "idle_timeout_minutes": IDLE_TIMEOUT_MINUTES,
            "upscaling_speed": 1.0,
            "head_node_type": "head",
            "available_node_types": {
                "head": {"resources": {"CPU": 0}},
                "worker": {"resources": {"CPU": 1}, "min_workers": 0, "max_workers": 1},
            },
        }
    )


def rayfield_side(workdir: Path) -> dict[str, float]:
    """One scale-up and scale-down on a ``local_process`` cluster."""
    import rayfield
    from rayfield.autoscaler import commands

    cfg = rayfield_config(workdir, "bench")
    commands.create_or_update(cfg, update_interval_s=LOOP_S, echo=lambda _: None)
    provider = commands.provider_for(cfg)
    try:
        os.environ.update(commands.cluster_env(cfg))
        rayfield.init()

        @rayfield.remote(num_cpus=1)
        def first() -> float:
            return time.time()

        t0 = time.time()
        up = rayfield.get(first.remote(), timeout=TIMEOUT_S) - t0
        t_end = time.time()
        deadline = t_end + TIMEOUT_S
        while commands.worker_nodes(provider) and time.time() < deadline:
            time.sleep(0.1)
        down = time.time() - t_end
        rayfield.shutdown()
        return {"up_s": up, "down_s": down}
    finally:
        commands.teardown(cfg, echo=lambda _: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray-python", default=sys.executable)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"rayfield": [], "ray": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as d:
            runs["rayfield"].append(rayfield_side(Path(d)))
        print("rayfield", json.dumps(runs["rayfield"][-1]), flush=True)
        runs["ray"].append(ray_side(args.ray_python))
        print("ray", json.dumps(runs["ray"][-1]), flush=True)
    print(f"loop {LOOP_S} s, idle timeout {IDLE_TIMEOUT_MINUTES * 60:.0f} s, {args.repeats} run(s)")
    print(f"{'':10} {'rayfield':>12} {'Ray':>12} {'Ray / rayfield':>15}")
    table: dict[str, Any] = {}
    for key, label in (("up_s", "scale-up"), ("down_s", "scale-down")):
        ours = statistics.median(r[key] for r in runs["rayfield"])
        theirs = statistics.median(r[key] for r in runs["ray"])
        table[key] = {"rayfield": ours, "ray": theirs}
        print(f"{label:10} {ours:11.2f}s {theirs:11.2f}s {theirs / ours:14.1f}x")
    print(json.dumps({"runs": runs, "median": table}))


if __name__ == "__main__":
    main()
