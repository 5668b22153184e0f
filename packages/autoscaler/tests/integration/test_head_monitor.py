"""Where the monitor runs (``commands.head_monitor_setup``, pure), what the head's
monitor gets (``head_monitor.head_bootstrap``, pure), and the head-monitor wiring for a
provider that keeps its own nodes (an ``external`` one, as a cloud's): ``start`` copies
the bootstrap config, key and launcher records to the head and starts the monitor
there, ``pull_state`` brings the head's records back, ``stop`` and ``remove`` end it.
The "head" here is this machine reached through a runner that runs bash in a home
directory of the test's own (no sshd; tests/integration/test_ssh_cluster.py does it over SSH)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import psutil
import pytest
import yaml
from conftest import ssh_config

from rayfield.autoscaler import commands, head_monitor
from rayfield.autoscaler.autoscaler import node_config, node_tags
from rayfield.autoscaler.command_runner import CommandError, CommandRunner
from rayfield.autoscaler.config import prepare_config
from rayfield.autoscaler.launcher_state import SSHClusterProvider
from rayfield.autoscaler.local import LocalNodeProvider
from rayfield.autoscaler.node_provider import STATUS_UP_TO_DATE
from rayfield.autoscaler.node_setup import NodeSetup
from rayfield.testing import wait_for

TESTS = Path(__file__).resolve().parent


class HomeRunner(CommandRunner):
    """Runs bash on this machine with ``HOME`` (and the working directory) set to
    ``home``: a head whose SSH user's home is ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.ip = "this-machine"

    def _bash(
        self, cmd: str, env: dict[str, str] | None, timeout_s: float | None, **kw: Any
    ) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(
            ["bash", "-c", cmd],
            cwd=self.home,
            env={**os.environ, "HOME": str(self.home), **(env or {})},
            stdin=subprocess.DEVNULL,
            timeout=timeout_s,
            check=False,
            **kw,
        )

    def run(
        self,
        cmd: str,
        env: dict[str, str] | None = None,
        log: IO[bytes] | None = None,
        timeout_s: float | None = None,
    ) -> int:
        out: Any = log if log is not None else subprocess.DEVNULL
        return self._bash(cmd, env, timeout_s, stdout=out, stderr=subprocess.STDOUT).returncode

    def output(self, cmd: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> str:
        proc = self._bash(cmd, env, timeout_s, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CommandError(f"{cmd!r} exited {proc.returncode}: {proc.stderr.strip()}")
        return str(proc.stdout)

    def sync_up(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        shutil.copyfile(source, self.home / target)

    def sync_down(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        shutil.copyfile(self.home / source, target)


class HomeSetup(NodeSetup):
    """A NodeSetup whose every node is reached through one :class:`HomeRunner`."""

    def __init__(self, config: dict[str, Any], provider: Any, home: Path) -> None:
        super().__init__(config, provider)
        self.home_runner = HomeRunner(home)

    def runner(self, node_id: str) -> Any:
        return self.home_runner


def external_config(tmp_path: Path, **provider: Any) -> dict[str, Any]:
    """A prepared config of the pool provider (tests/integration/pool_provider.py) as an
    ``external`` provider, with a dummy key and a file mount."""
    key = tmp_path / "key"
    key.write_text("a private key")
    key.chmod(0o600)
    return prepare_config(
        {
            "cluster_name": "hm",
            "provider": {
                "type": "external",
                "module": "pool_provider.PoolProvider",
                "cluster_dir": str(tmp_path / "state"),
                "extra_config": {
                    "hosts": ["10.9.0.1", "10.9.0.2"],
                    "pool_file": str(tmp_path / "pool.json"),
                },
                **provider,
            },
            "auth": {"ssh_user": "root", "ssh_private_key": str(key)},
            "max_workers": 1,
            "file_mounts": {"/opt/app": str(tmp_path)},
        }
    )


def test_the_monitor_runs_on_the_head_of_ssh_clusters_and_here_for_local_process(
    tmp_path: Path,
) -> None:
    # local_process: nodes are processes here, no setup: the monitor runs here.
    lp_cfg = prepare_config(
        {
            "cluster_name": "lp",
            "provider": {"type": "local_process", "cluster_dir": str(tmp_path / "lp")},
            "max_workers": 1,
        }
    )
    lp = commands.provider_for(lp_cfg)
    assert commands.node_setup(lp_cfg, lp) is None
    assert commands.head_monitor_setup(lp, None) is None
    # local (SSH): on the head.
    cfg = ssh_config(tmp_path)
    cfg["provider"]["cluster_dir"] = str(tmp_path / "local")
    local = LocalNodeProvider(cfg["provider"], "s")
    setup = NodeSetup(cfg, local)
    assert commands.head_monitor_setup(local, setup) is setup
    # a provider that keeps its own nodes (clouds, external): on the head too.
    ext_cfg = external_config(tmp_path)
    ext = commands.provider_for(ext_cfg)
    assert isinstance(ext, SSHClusterProvider)
    ext_setup = commands.node_setup(ext_cfg, ext)
    assert ext_setup is not None
    assert commands.head_monitor_setup(ext, ext_setup) is ext_setup


def test_head_bootstrap_points_at_the_copies_and_holds_no_secret(tmp_path: Path) -> None:
    cfg = external_config(tmp_path, use_internal_ips=False)
    out = head_monitor.head_bootstrap(cfg)
    d = "~/rayfield-cluster-hm"
    assert out["provider"]["cluster_dir"] == d
    assert out["provider"]["use_internal_ips"] is True  # the head reaches workers inside
    assert out["auth"] == {"ssh_user": "root", "ssh_private_key": f"{d}/ssh_key"}
    assert out["file_mounts"] == {"/opt/app": "/opt/app"}  # the head's own copy
    assert out["provider"]["extra_config"] == cfg["provider"]["extra_config"]
    assert cfg["provider"]["cluster_dir"] == str(tmp_path / "state")  # not changed
    assert "a private key" not in yaml.safe_dump(out)


def test_head_python_is_a_command() -> None:
    cfg: dict[str, Any] = {"provider": {}}
    assert head_monitor.head_python(cfg) == ["python3"]
    cfg["provider"]["head_python"] = "env PYTHONPATH='/opt/my lib' /opt/venv/bin/python"
    assert head_monitor.head_python(cfg) == [
        "env",
        "PYTHONPATH=/opt/my lib",
        "/opt/venv/bin/python",
    ]
    cfg["provider"]["head_python"] = "python3 'unbalanced"
    with pytest.raises(head_monitor.HeadMonitorError, match="not a command"):
        head_monitor.head_python(cfg)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_start_copies_privately_runs_there_pulls_back_stops_and_removes(tmp_path: Path) -> None:
    home = tmp_path / "head-home"
    home.mkdir()
    python = f"env PYTHONPATH={TESTS} {sys.executable}"  # pool_provider on the head's path
    cfg = external_config(tmp_path, head_python=python)
    provider = commands.provider_for(cfg)
    assert isinstance(provider, SSHClusterProvider)
    head_type = cfg["head_node_type"]
    provider.create_node(
        node_config(cfg, head_type), node_tags(cfg, head_type, True, STATUS_UP_TO_DATE), 1
    )
    head = commands.head_node(provider)
    assert head is not None
    token = "0123456789abcdef-the-cluster-token"
    provider.record_started(
        head, {"cluster_node_id": "h1", "gcs_address": "127.0.0.1:9", "token": token}
    )
    setup = HomeSetup(cfg, provider, home)
    # Before `up` started anything there, nothing reaches for the head's monitor.
    assert not head_monitor.started(setup)
    assert not head_monitor.running(cfg, setup) and not head_monitor.stop(cfg, setup)
    assert not head_monitor.pull_state(cfg, setup)
    with pytest.raises(head_monitor.HeadMonitorError, match="run `rayfield-autoscaler up`"):
        head_monitor.follow_log(cfg, setup, 10, False)

    said: list[str] = []
    pid = head_monitor.start(cfg, setup, interval_s=60, echo=said.append)
    d = home / "rayfield-cluster-hm"
    try:
        assert "the autoscaler runs on the head" in said[0]
        assert head_monitor.started(setup) and head_monitor.running(cfg, setup)
        proc = psutil.Process(pid)
        assert head_monitor.MODULE in proc.cmdline() and proc.cwd() == str(d)
        assert _mode(d) == 0o700
        for name in ("ssh_key", "bootstrap.yaml", "launcher.json", "monitor.log"):
            assert _mode(d / name) == 0o600, name
        assert (d / "ssh_key").read_text() == "a private key"
        boot = (d / "bootstrap.yaml").read_text()
        assert yaml.safe_load(boot) == head_monitor.head_bootstrap(cfg)
        assert token not in boot  # the token is only in the records
        assert json.loads((d / "launcher.json").read_text())["nodes"][head]["token"] == token

        # The head's monitor keeps the workers' records: pull brings them back here,
        # and the head's own record stays this machine's.
        worker = "pool-w1"  # a record the head's monitor made (not in the pool: no setup)
        theirs = json.loads((d / "launcher.json").read_text())
        theirs["nodes"][worker] = {"tags": {}, "cluster_node_id": "w1"}
        theirs["nodes"][head] = {"tags": {}, "token": "not the launcher's"}
        (d / "launcher.json").write_text(json.dumps(theirs))
        assert head_monitor.pull_state(cfg, setup)
        assert provider.cluster_node_id(worker) == "w1"
        assert provider.token(head) == token

        assert head_monitor.stop(cfg, setup)
        wait_for(lambda: _gone(pid), 30, "the head's monitor to exit", interval=0.2)
        assert not head_monitor.running(cfg, setup)
        assert "monitor of 'hm' started" in (d / "monitor.log").read_text()
        head_monitor.remove(cfg, setup)
        assert not d.exists() and not head_monitor.started(setup)
    finally:
        if not _gone(pid):
            psutil.Process(pid).kill()
