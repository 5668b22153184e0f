"""`rayfield-autoscaler up` of a 3-node SSH cluster (a head and two workers, the `local`
provider) on hosts that are network namespaces with their own sshd, as the tests'
``tests/integration/netns.py`` makes them (needs root, `ip`, Debian's openssh-server and rsync).

Prints, per run: the wall time of ``up`` (the head set up over SSH, its node started and
the autoscaler started on the head), the time until both workers are set up over SSH and
their nodes joined (``up-to-date`` with a node id, read from the head's records), and of
``down``. Nothing is asserted.

    python packages/autoscaler/benchmarks/bench_up_ssh.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from netns import node_commands, ssh_hosts

from rayfield.autoscaler import head_monitor
from rayfield.autoscaler.commands import node_setup, provider_for, worker_nodes
from rayfield.autoscaler.config import load_config
from rayfield.autoscaler.node_provider import STATUS_UP_TO_DATE, TAG_NODE_STATUS


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``rayfield-autoscaler ARGS`` in a new process, its output captured."""
    command = [sys.executable, "-m", "rayfield.autoscaler.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def cluster_yaml(path: Path, ips: list[str], user: str, key: Path, name: str) -> Path:
    stop, start = node_commands()
    cfg: dict[str, Any] = {
        "cluster_name": name,
        "provider": {
            "type": "local",
            "head_ip": ips[0],
            "worker_ips": ips[1:],
            "cluster_dir": str(path.parent / "cluster"),
            "head_python": sys.executable,
        },
        "auth": {"ssh_user": user, "ssh_private_key": str(key)},
        "min_workers": len(ips) - 1,
        "max_workers": len(ips) - 1,
        "head_node": {"resources": {"CPU": 0}, "object_store_memory": 64 << 20},
        "worker_nodes": {"resources": {"CPU": 1}, "object_store_memory": 64 << 20},
        "head_start_ray_commands": [stop, f"{start} --head --port=6379"],
        "worker_start_ray_commands": [stop, f'{start} --address="$RAYFIELD_ADDRESS"'],
        "stop_ray_commands": [stop],
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def one_run(workdir: Path, hosts: Any, index: int) -> dict[str, float]:
    cfg_path = cluster_yaml(
        workdir / f"cluster{index}.yaml",
        hosts.ips,
        hosts.ssh_user,
        hosts.ssh_private_key,
        f"bench{index}",
    )
    cfg = load_config(cfg_path)
    provider = provider_for(cfg)
    setup = node_setup(cfg, provider)
    t0 = time.monotonic()
    up = cli("up", str(cfg_path), "-y", "--update-interval-s", "0.5")
    if up.returncode != 0:
        raise SystemExit(f"up failed:\n{up.stdout}\n{up.stderr}")
    up_s = time.monotonic() - t0

    def workers_joined() -> bool:
        head_monitor.pull_state(cfg, setup)
        ready = [
            w
            for w in worker_nodes(provider)
            if provider.node_tags(w).get(TAG_NODE_STATUS) == STATUS_UP_TO_DATE
            and provider.cluster_node_id(w)
        ]
        return len(ready) == len(hosts.ips) - 1

    deadline = time.monotonic() + 300
    while not workers_joined():
        if time.monotonic() > deadline:
            raise SystemExit("the workers were not set up over SSH within 300 s")
        time.sleep(0.2)
    all_s = time.monotonic() - t0
    t1 = time.monotonic()
    down = cli("down", str(cfg_path), "-y")
    if down.returncode != 0:
        raise SystemExit(f"down failed:\n{down.stdout}\n{down.stderr}")
    return {"up_s": up_s, "workers_s": all_s, "down_s": time.monotonic() - t1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-up-ssh-") as tmp:
        workdir = Path(tmp)
        with ssh_hosts(workdir / "hosts", 3) as hosts:
            runs = []
            for i in range(args.repeats):
                run = one_run(workdir, hosts, i)
                print(
                    f"run {i + 1}: up {run['up_s']:.2f} s, both workers joined "
                    f"{run['workers_s']:.2f} s, down {run['down_s']:.2f} s",
                    flush=True,
                )
                runs.append(run)
    for key, what in (("up_s", "up"), ("workers_s", "workers joined"), ("down_s", "down")):
        print(f"{what:>15}: median {statistics.median(r[key] for r in runs):.2f} s")


if __name__ == "__main__":
    main()
