"""End to end on real processes: `up` a local_process cluster, run a driver on it, watch
the autoscaler add a worker for queued tasks and remove it after the idle timeout; then
`request_resources` grows it with no task queued (and `rayfield status` shows the
request), a killed worker is replaced, clearing the request shrinks it again; `down`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import cli, processes_under, write_config

from rayfield.autoscaler.commands import head_node, monitor_log, provider_for, worker_nodes
from rayfield.autoscaler.config import load_config
from rayfield.autoscaler.local_process import LocalProcessProvider
from rayfield.testing import wait_for

REQUEST = (
    "import sys, rayfield; from rayfield.autoscaler.sdk import request_resources; "
    "rayfield.init(); request_resources(num_cpus=int(sys.argv[1]))"
)


def request_cpus(cfg_path: Path, num_cpus: int) -> None:
    """Call request_resources(num_cpus=...) from a driver on the head."""
    cmd = shlex.join([sys.executable, "-c", REQUEST, str(num_cpus)])
    done = cli("exec", str(cfg_path), cmd)
    assert done.returncode == 0, done.stdout + done.stderr


def node_pid(provider: LocalProcessProvider, node_id: str) -> int:
    """The pid of the node process of ``node_id`` (from its session's node.json)."""
    temp_dir = Path(provider.records()[node_id]["temp_dir"])
    (session,) = [p for p in temp_dir.glob("session_*") if p.name != "session_latest"]
    return int(json.loads((session / "node.json").read_text())["pid"])


pytestmark = pytest.mark.timeout(600)


DRIVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import rayfield
    from rayfield.testing import wait_for

    out = Path(sys.argv[1])
    rayfield.init()  # RAYFIELD_ADDRESS and RAYFIELD_TOKEN come from `submit`

    @rayfield.remote(num_cpus=1)
    def where():
        return rayfield.get_runtime_context().get_node_id()

    @rayfield.remote(num_cpus=1)
    def hold(i):
        node = rayfield.get_runtime_context().get_node_id()
        (out / f"started-{i}").write_text(node)
        wait_for((out / "release").exists, 300, "the test's release", interval=0.05)
        return node

    (out / "first").write_text(rayfield.get(where.remote(), timeout=120))
    refs = [hold.remote(0), hold.remote(1)]  # 2 CPUs wanted, 1 there: one task queues
    # the test names the new worker once it is up
    wait_for((out / "go").exists, 300, "the test's go", interval=0.05)
    new_node = (out / "go").read_text()
    # Work submitted from now on goes to the new worker, once this node's view of the
    # cluster (refreshed every heartbeat) has it; until then it queues on the busy one.
    def ran_on_new_node():
        ref = where.remote()
        refs.append(ref)
        ready, _ = rayfield.wait([ref], timeout=2)
        return ready and rayfield.get(ready[0]) == new_node

    wait_for(ran_on_new_node, 120, "a task on the new worker", interval=0)
    (out / "on-new-node").write_text(new_node)
    print("ran on", sorted(set(rayfield.get(refs, timeout=300))))
    # Nothing runs now: the workers report themselves idle with their heartbeats.
    def idle_reported():
        idle = [n["idle_duration_s"] for n in rayfield.nodes() if n["alive"]]
        return idle if any(s > 0 for s in idle) else None

    print("idle reported", wait_for(idle_reported, 30, "a node reporting idle time"))
    """
)


def test_up_scale_up_scale_down_request_recover_down(tmp_path: Path, cluster_dir: Path) -> None:
    cfg_path = write_config(tmp_path / "cluster.yaml", cluster_dir)
    provider = provider_for(load_config(cfg_path))
    up = cli("up", str(cfg_path), "-y", "--update-interval-s", "0.5")
    assert up.returncode == 0, up.stdout + up.stderr
    head = head_node(provider)
    assert head is not None and provider.is_running(head)
    ip = cli("get-head-ip", str(cfg_path))
    assert ip.stdout.strip() == "127.0.0.1"
    # `up` again: the head (same launch config) is kept, the monitor restarted.
    monitor_pid = (cluster_dir / "monitor.pid").read_text()
    again = cli("up", str(cfg_path), "-y", "--update-interval-s", "0.5")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"the head {head} is up to date" in again.stdout
    assert head_node(provider) == head
    assert (cluster_dir / "monitor.pid").read_text() != monitor_pid

    # The monitor launches min_workers (1) and the worker joins the cluster.
    def workers_joined(n: int) -> list[str]:
        ids = worker_nodes(provider)
        joined = [w for w in ids if provider.cluster_node_id(w)]
        return joined if len(ids) == len(joined) == n else []

    (first_worker,) = wait_for(
        lambda: workers_joined(1), 120, "the min_workers worker", interval=0.2
    )

    out = tmp_path / "driver-out"
    out.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    argv = [sys.executable, "-m", "rayfield.autoscaler.cli", "submit", str(cfg_path)]
    driver = subprocess.Popen(
        [*argv, str(script), str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

    try:
        # The first task runs on the worker (the head has no CPU).
        first = wait_for(
            lambda: (out / "first").exists() and (out / "first").read_text(),
            120,
            "the first task",
            interval=0.2,
        )
        assert first == provider.cluster_node_id(first_worker)
        # Two 1-CPU tasks on one 1-CPU worker: one queues, and the autoscaler adds a
        # second worker; work submitted from then on runs on it.
        joined = wait_for(lambda: workers_joined(2), 120, "a second worker", interval=0.2)
        (second_worker,) = set(joined) - {first_worker}
        new_node = provider.cluster_node_id(second_worker)
        (out / "go").write_text(str(new_node))
        wait_for(
            lambda: (out / "on-new-node").exists(), 150, "a task on the new worker", interval=0.2
        )
        (out / "release").write_text("")
        output, _ = driver.communicate(timeout=120)
        assert driver.returncode == 0, output
        assert "idle reported" in output, output  # rayfield.nodes() has the nodes' figure
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
            cli("down", str(cfg_path), "-y")

    # Idle for 3 s (idle_timeout_minutes 0.05): back to min_workers, the head kept.
    wait_for(lambda: workers_joined(1), 120, "scale-down to min_workers", interval=0.2)
    assert head_node(provider) == head
    log = monitor_log(provider).read_text()
    assert "launching 1 node(s) of type worker" in log and "(idle)" in log, log

    # request_resources(num_cpus=2) with no task queued: a second 1-CPU worker starts,
    # and `rayfield status` shows the request in the autoscaler's view.
    request_cpus(cfg_path, 2)
    joined = wait_for(
        lambda: workers_joined(2), 120, "a worker for request_resources", interval=0.2
    )
    rayfield = shlex.quote(str(Path(sys.executable).parent / "rayfield"))

    def status_shows_request() -> str:
        out = cli("exec", str(cfg_path), f'{rayfield} status --address "$RAYFIELD_ADDRESS"')
        text = out.stdout
        return text if "requested (request_resources)\n    2 x 1 CPU" in text else ""

    status = wait_for(status_shows_request, 30, "the request in `rayfield status`", interval=0.2)
    assert "autoscaler of 't'" in status and "demand: none" in status, status

    # A worker whose node process dies is declared dead by the GCS, terminated as lost
    # and replaced (the request still wants 2 CPUs).
    assert isinstance(provider, LocalProcessProvider)
    victim = joined[0]
    os.kill(node_pid(provider, victim), signal.SIGKILL)
    replaced = wait_for(
        lambda: victim not in worker_nodes(provider) and workers_joined(2),
        120,
        "the killed worker replaced",
        interval=0.2,
    )
    assert victim not in replaced
    assert f"terminating {victim} (lost)" in monitor_log(provider).read_text()

    # request_resources(0) clears the request: back to min_workers after the idle timeout.
    request_cpus(cfg_path, 0)
    wait_for(lambda: workers_joined(1), 120, "scale-down once the request is cleared", interval=0.2)

    down = cli("down", str(cfg_path), "-y")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "terminated 2 nodes" in down.stdout
    assert provider.non_terminated_nodes({}) == []
    wait_for(
        lambda: not processes_under(cluster_dir),
        30,
        "no process left under the cluster dir",
        interval=0.2,
    )
