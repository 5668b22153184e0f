"""End to end over real SSH: `up` a `local`-provider cluster on two hosts (network
namespaces with their own sshd, tests/integration/netns.py) whose autoscaler runs on the head (the
bootstrap config copied there; `monitor` shows its log), `submit` a script with
arguments whose task lands on the worker host, change a file mount and `up` again (the
nodes are set up again), `down` (nothing of the cluster left running on the hosts). On
the way: `attach`, `rsync-up`/`rsync-down`, `exec --tmux` and `exec --port-forward`
against the head. Then (slow) the same hosts as the pool of an `external` provider
(tests/integration/pool_provider.py) that creates and terminates nodes: `up` SSHes into the node the
provider gave it and starts the autoscaler there, as for a cloud provider; the
launcher's state is kept in its own directory."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import cli
from netns import SSHHosts, namespaces_left, node_commands, ssh_hosts

from rayfield.autoscaler import head_monitor
from rayfield.autoscaler.commands import head_node, node_setup, provider_for, worker_nodes
from rayfield.autoscaler.config import load_config
from rayfield.autoscaler.launcher_state import SSHClusterProvider
from rayfield.autoscaler.node_provider import (
    KIND_WORKER,
    STATUS_UP_TO_DATE,
    TAG_NODE_STATUS,
    TAG_RUNTIME_CONFIG,
)
from rayfield.autoscaler.updater import runtime_hash
from rayfield.testing import wait_for

pytestmark = pytest.mark.timeout(400)

DRIVER = textwrap.dedent(
    """
    import json, os, socket, sys
    import rayfield

    rayfield.init()  # RAYFIELD_ADDRESS and RAYFIELD_TOKEN come from `submit`

    @rayfield.remote(num_cpus=1)
    def where():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # The node was started with RAYFIELD_HEAD_IP (its workers inherit it); a UDP
        # connect sends nothing and gives the address this host reaches the head from.
        s.connect((os.environ["RAYFIELD_HEAD_IP"], 9))
        return rayfield.get_runtime_context().get_node_id(), s.getsockname()[0]

    node, ip = rayfield.get(where.remote(), timeout=120)
    print("RESULT " + json.dumps({"node": node, "ip": ip, "args": sys.argv[1:]}))
    """
)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHosts]:
    """Two sshd hosts for the module (each test's cluster is down before the next)."""
    with ssh_hosts(tmp_path_factory.mktemp("hosts"), 2) as found:
        yield found
    assert namespaces_left(found) == []


def head_python(*extra_path: str) -> str:
    """``provider.head_python``: this interpreter, with this process's ``PYTHONPATH``
    (a checkout run from source) and ``extra_path`` before it, so that the head's
    monitor runs the code under test (an SSH session does not pass the environment)."""
    path = [*extra_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    if not path:
        return sys.executable
    return shlex.join(["env", f"PYTHONPATH={os.pathsep.join(path)}", sys.executable])


def cluster_yaml(path: Path, hosts: SSHHosts, app: Path, name: str) -> Path:
    stop, start = node_commands()
    cfg: dict[str, Any] = {
        "cluster_name": name,
        "provider": {
            "type": "local",
            "head_ip": hosts.ips[0],
            "worker_ips": [hosts.ips[1]],
            "cluster_dir": str(path.parent / "cluster"),
            "head_python": head_python(),
        },
        "auth": {"ssh_user": hosts.ssh_user, "ssh_private_key": str(hosts.ssh_private_key)},
        "min_workers": 1,
        "max_workers": 1,
        "head_node": {"resources": {"CPU": 0}, "object_store_memory": 64 << 20},
        "worker_nodes": {"resources": {"CPU": 1}, "object_store_memory": 64 << 20},
        "file_mounts": {str(path.parent / "mounted-app"): str(app)},
        "setup_commands": [
            f"cat {path.parent / 'mounted-app' / 'version'} >> {path.parent}/setups"
        ],
        "head_start_ray_commands": [stop, f"{start} --head --port=6379"],
        "worker_start_ray_commands": [stop, f'{start} --address="$RAYFIELD_ADDRESS"'],
        "stop_ray_commands": [stop],
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_driver(cfg_path: Path, tmp_path: Path) -> dict[str, object]:
    """`exec` DRIVER on the head: the node and address its task ran at."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    run = cli("exec", str(cfg_path), f"{sys.executable} {script}")
    assert run.returncode == 0, run.stdout + run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
    return result


def host_processes(hosts: SSHHosts) -> list[str]:
    """Command lines of the processes in the hosts' namespaces, sshd aside."""
    found = []
    for ns in hosts.namespaces:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "sshd" not in cmd:
                found.append(cmd)
    return found


def check_hosts_clean(hosts: SSHHosts, on_head: Path) -> None:
    """After ``down``: no rayfield process on any host, the head's copies gone."""
    wait_for(
        lambda: not host_processes(hosts),
        30,
        "no rayfield process left on the hosts",
        interval=0.2,
    )
    assert not on_head.exists()  # the key copy and the bootstrap config are gone


def tear_down(provider: Any, cfg_path: Path, hosts: SSHHosts, on_head: Path, name: str) -> None:
    """Take the cluster down if a test left it up, and remove every host's directory."""
    if provider.non_terminated_nodes({}):
        cli("down", str(cfg_path), "-y")
    shutil.rmtree(on_head, ignore_errors=True)
    for ip in hosts.ips:
        shutil.rmtree(f"/tmp/rayfield-{name}-{ip}", ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVE_ONCE = (
    "import socket; s = socket.socket(); "
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port})); "
    "s.listen(); c, _ = s.accept(); c.sendall(b'hello from the head'); c.close()"
)


def check_head_access(cfg_path: Path, hosts: SSHHosts, tmp_path: Path) -> None:
    """attach (without a terminal), rsync-up/down, exec --tmux and --port-forward."""
    attach = subprocess.run(
        [sys.executable, "-m", "rayfield.autoscaler.cli", "attach", str(cfg_path)],
        input='echo "A=$RAYFIELD_ADDRESS T=${#RAYFIELD_TOKEN}"; ip -4 -o addr show\n',
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert attach.returncode == 0, attach.stdout + attach.stderr
    assert f"A={hosts.ips[0]}:6379 T=64" in attach.stdout  # the token read on the head
    assert hosts.ips[0] in attach.stdout and hosts.ips[1] not in attach.stdout

    (tmp_path / "up.txt").write_text("up")
    on_head = tmp_path / "on-head" / "up.txt"  # the hosts share this filesystem
    assert cli("rsync-up", str(cfg_path), str(tmp_path / "up.txt"), str(on_head)).returncode == 0
    assert on_head.read_text() == "up"
    down = cli("rsync-down", str(cfg_path), str(on_head), str(tmp_path / "down.txt"))
    assert down.returncode == 0 and (tmp_path / "down.txt").read_text() == "up"

    out = tmp_path / "tmux-out"
    tmux = cli("exec", str(cfg_path), f'echo "$RAYFIELD_HEAD_IP" > {out}', "--tmux")
    assert tmux.returncode == 0, tmux.stdout + tmux.stderr
    wait_for(
        lambda: out.exists() and out.read_text() == f"{hosts.ips[0]}\n", 30, "tmux", interval=0.2
    )
    assert cli("exec", str(cfg_path), "tmux kill-server").returncode == 0

    port = free_port()
    serve = f'{sys.executable} -c "{SERVE_ONCE.format(port=port)}"'
    argv = [sys.executable, "-m", "rayfield.autoscaler.cli", "exec", str(cfg_path), serve]
    forward = subprocess.Popen([*argv, "--port-forward", str(port)])
    try:

        def fetch() -> bytes:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    return c.recv(100)
            except OSError:
                return b""

        assert wait_for(fetch, 60, "the forwarded port", interval=0.2) == b"hello from the head"
        assert forward.wait(60) == 0
    finally:
        if forward.poll() is None:
            forward.kill()
            forward.wait()


def test_up_runs_work_on_the_worker_host_updates_on_mount_change_down(
    tmp_path: Path, hosts: SSHHosts
) -> None:
    name = f"ssh{secrets.token_hex(3)}"
    app = tmp_path / "app"
    app.mkdir()
    (app / "version").write_text("v1\n")
    cfg_path = cluster_yaml(tmp_path / "cluster.yaml", hosts, app, name)
    cfg = load_config(cfg_path)
    provider = provider_for(cfg)
    setup = node_setup(cfg, provider)
    assert setup is not None
    on_head = Path(f"~{hosts.ssh_user}").expanduser() / head_monitor.head_dir(cfg)
    try:
        up = cli("up", str(cfg_path), "-y", "--update-interval-s", "0.5")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "setting up the head" in up.stdout
        assert "the autoscaler runs on the head" in up.stdout
        head = head_node(provider)
        assert head is not None and provider.internal_ip(head) == hosts.ips[0]
        assert cli("get-head-ip", str(cfg_path)).stdout.strip() == hosts.ips[0]
        # The monitor runs in the head's namespace, from the bootstrap config copied there.
        assert oct((on_head / "bootstrap.yaml").stat().st_mode & 0o777) == "0o600"
        assert oct((on_head / "ssh_key").stat().st_mode & 0o777) == "0o600"
        ns_pids = subprocess.run(
            ["ip", "netns", "pids", hosts.namespaces[0]], capture_output=True, text=True
        ).stdout.split()
        monitor_pid = int((on_head / "monitor.pid").read_text())
        assert str(monitor_pid) in ns_pids

        def worker_up(hash_: str | None = None) -> str | None:
            head_monitor.pull_state(cfg, setup)  # the head's monitor keeps the records
            for w in worker_nodes(provider):
                tags = provider.node_tags(w)
                up = tags.get(TAG_NODE_STATUS) == STATUS_UP_TO_DATE and provider.cluster_node_id(w)
                if up and (hash_ is None or tags.get(TAG_RUNTIME_CONFIG) == hash_):
                    return w
            return None

        worker = wait_for(worker_up, 120, "the worker set up over SSH", interval=0.2)
        assert provider.internal_ip(worker) == hosts.ips[1]
        assert cli("get-worker-ips", str(cfg_path)).stdout.split()[0] == hosts.ips[1]
        # Host keys pinned at first contact: the launcher's (it reached the head) and the
        # head's own (its monitor reached the worker), 0600 in the private directories.
        for known, ip in (
            (provider.known_hosts, hosts.ips[0]),
            (on_head / "known_hosts", hosts.ips[1]),
        ):
            assert stat.S_IMODE(known.stat().st_mode) == 0o600, known
            assert ip in {line.split()[0] for line in known.read_text().splitlines()}, known
        assert (tmp_path / "mounted-app" / "version").read_text() == "v1\n"

        log = cli("monitor", str(cfg_path), "--no-follow", "--lines", "500")
        assert log.returncode == 0, log.stdout + log.stderr
        assert f"monitor of {name!r} started (pid {monitor_pid})" in log.stdout
        assert "launching 1 node(s) of type worker" in log.stdout

        # `submit` copies the script to the head and runs it there with its arguments.
        script = tmp_path / "driver.py"
        script.write_text(DRIVER)
        run = cli("submit", str(cfg_path), str(script), "one", "two words")
        assert run.returncode == 0, run.stdout + run.stderr
        line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
        result = json.loads(line.removeprefix("RESULT "))
        assert result == {
            "node": provider.cluster_node_id(worker),
            "ip": hosts.ips[1],
            "args": ["one", "two words"],
        }

        check_head_access(cfg_path, hosts, tmp_path)

        # A file mount changes: `up` sets the head up again, the monitor the worker.
        (app / "version").write_text("v2\n")
        again = cli("up", str(cfg_path), "-y", "--update-interval-s", "0.5")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "setting up the head" in again.stdout
        # The head's monitor hashes the mounts as the head has them.
        new_hash = runtime_hash(head_monitor.head_bootstrap(load_config(cfg_path)), KIND_WORKER)
        wait_for(lambda: worker_up(new_hash), 120, "the worker set up again", interval=0.2)
        assert (tmp_path / "mounted-app" / "version").read_text() == "v2\n"
        assert (tmp_path / "setups").read_text().splitlines() == ["v1", "v1", "v2", "v2"]

        down = cli("down", str(cfg_path), "-y")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "terminated 2 nodes" in down.stdout
        assert provider.non_terminated_nodes({}) == []
        check_hosts_clean(hosts, on_head)
    finally:
        tear_down(provider, cfg_path, hosts, on_head, name)


@pytest.mark.slow  # 66-113 s on 2 busy cores: a second SSH cluster up, used and down
def test_up_on_an_external_provider_runs_its_monitor_on_the_head_it_launched(
    tmp_path: Path, hosts: SSHHosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a cloud provider would: `up` SSHes into the head the provider gave it, copies
    the bootstrap config, key and launcher records there and starts the monitor in the
    head's namespace, which launches the worker through the same provider and sets it
    up over SSH from the head; `down` stops it and pulls the records back."""
    # The launcher's CLI imports the provider's module (and keeps this checkout's path).
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent), prepend=os.pathsep)
    name = f"ext{secrets.token_hex(3)}"
    app = tmp_path / "app"
    app.mkdir()
    (app / "version").write_text("v1\n")
    cfg_path = cluster_yaml(tmp_path / "cluster.yaml", hosts, app, name)
    cfg = yaml.safe_load(cfg_path.read_text())
    pool_file = tmp_path / "pool.json"
    state = tmp_path / "state"
    cfg["provider"] = {
        "type": "external",
        "module": "pool_provider.PoolProvider",
        "cluster_dir": str(state),
        "use_internal_ips": True,
        # the head's Python, with the provider's module on its path
        "head_python": head_python(str(Path(__file__).parent)),
        "extra_config": {"hosts": hosts.ips, "pool_file": str(pool_file)},
    }
    cfg_path.write_text(yaml.safe_dump(cfg))
    provider = provider_for(load_config(cfg_path))
    assert isinstance(provider, SSHClusterProvider)
    on_head = Path(pwd.getpwnam(hosts.ssh_user).pw_dir) / f"rayfield-cluster-{name}"
    try:
        up = cli("up", str(cfg_path), "-y", "--update-interval-s", "0.5")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "the autoscaler runs on the head" in up.stdout
        head = head_node(provider)
        assert head is not None and head.startswith("pool-")  # the pool provider's node
        head_ip = provider.internal_ip(head)
        assert head_ip in hosts.ips and f"the head {head} at {head_ip} over SSH" in up.stdout
        assert cli("get-head-ip", str(cfg_path)).stdout.strip() == head_ip
        # The monitor runs in the head's namespace, not on this machine.
        assert not (state / "monitor.pid").exists()
        head_ns = hosts.namespaces[hosts.ips.index(head_ip)]
        ns_pids = subprocess.run(
            ["ip", "netns", "pids", head_ns], capture_output=True, text=True
        ).stdout.split()
        assert (on_head / "monitor.pid").read_text().strip() in ns_pids

        def worker_up() -> str | None:
            for w in worker_nodes(provider):
                if provider.node_tags(w).get(TAG_NODE_STATUS) == STATUS_UP_TO_DATE:
                    return w
            return None

        worker = wait_for(worker_up, 120, "the worker the head's monitor launched", interval=0.2)
        worker_ip = provider.internal_ip(worker)
        assert {head_ip, worker_ip} == set(hosts.ips)
        # get-worker-ips pulls the head's records (the worker's rayfield id) back
        assert cli("get-worker-ips", str(cfg_path)).stdout.split() == [worker_ip, worker]
        assert provider.cluster_node_id(worker)

        assert run_driver(cfg_path, tmp_path) == {
            "node": provider.cluster_node_id(worker),
            "ip": worker_ip,
            "args": [],
        }
        log = cli("monitor", str(cfg_path), "--no-follow", "--lines", "500")
        assert "launching 1 node(s) of type worker" in log.stdout, log.stdout + log.stderr

        # The launcher's state: a private directory of its own, the token in it and not
        # in the provider's node records; the head's copies private too.
        token = provider.token(head)
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        for f in ("launcher.json", "bootstrap.yaml"):
            assert stat.S_IMODE((state / f).stat().st_mode) == 0o600, f
        assert token in (state / "launcher.json").read_text()
        assert token not in pool_file.read_text()
        d = head_monitor.head_dir(load_config(cfg_path))
        show = cli("exec", str(cfg_path), f"stat -c %a {d} {d}/ssh_key {d}/bootstrap.yaml")
        assert show.stdout.split() == ["700", "600", "600"], show.stdout + show.stderr
        boot = yaml.safe_load((on_head / "bootstrap.yaml").read_text())
        assert boot["auth"]["ssh_private_key"] == f"~/{d}/ssh_key"
        assert token not in (on_head / "bootstrap.yaml").read_text()
        assert (on_head / "ssh_key").read_bytes() == hosts.ssh_private_key.read_bytes()

        down = cli("down", str(cfg_path), "-y")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopped the autoscaler on the head" in down.stdout
        assert "terminated 2 nodes" in down.stdout
        assert json.loads(pool_file.read_text()) == {}  # the hosts went back to the pool
        # Their host keys are forgotten: a cloud gives a terminated node's address to
        # a new machine, whose key is accepted as new.
        assert (state / "known_hosts").read_text() == ""
        check_hosts_clean(hosts, on_head)
    finally:
        tear_down(provider, cfg_path, hosts, on_head, name)
