"""The command line: errors end with one line and status 1; no cluster is started."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from conftest import write_config

from rayfield.autoscaler.cli import COMMANDS, cli


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_every_command_is_in_the_group() -> None:
    names = {c.name for c in COMMANDS}
    assert names == {
        "up",
        "down",
        "exec",
        "submit",
        "attach",
        "rsync-up",
        "rsync-down",
        "get-head-ip",
        "get-worker-ips",
        "monitor",
    }
    assert names <= set(cli.commands)


def test_the_plugin_entry_points_name_each_command() -> None:
    """rayfield-cli adds each entry of ``rayfield.cli_commands`` under its name."""
    from importlib.metadata import entry_points

    found = {e.name: e.load() for e in entry_points(group="rayfield.cli_commands")}
    assert found == {c.name: c for c in COMMANDS}


def test_a_bad_config_gives_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cluster_name: x\nmax_worker: 2\nprovider: {type: local_process}\n")
    code, out = run("up", str(cfg), "-y")
    assert code == 1
    assert out.strip() == "Error: unknown config key 'max_worker': did you mean 'max_workers'?"


def test_commands_on_a_cluster_that_is_not_up(tmp_path: Path, cluster_dir: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", cluster_dir)
    code, out = run("get-head-ip", str(cfg))
    assert code == 1 and "has no head: run `rayfield-autoscaler up` first" in out
    code, out = run("get-worker-ips", str(cfg))
    assert code == 0 and out == ""
    code, out = run("exec", str(cfg), "true")
    assert code == 1 and "cluster 't' is not up" in out
    code, out = run("exec", str(cfg), "true", "--tmux")
    assert code == 1 and "--tmux and --port-forward need an SSH cluster" in out
    code, out = run("attach", str(cfg))
    assert code == 1 and "cluster 't' is not up" in out
    code, out = run("rsync-up", str(cfg), str(tmp_path), str(tmp_path / "x"))
    assert code == 1 and "the cluster has no head" in out
    code, out = run("monitor", str(cfg), "--no-follow")
    assert code == 1 and "no autoscaler log" in out
    code, out = run("down", str(cfg), "-y")
    assert code == 0 and "terminated 0 nodes" in out


def test_up_options_are_checked(tmp_path: Path, cluster_dir: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", cluster_dir)
    code, out = run("up", str(cfg), "-y", "--no-restart", "--restart-only")
    assert code == 1 and "--no-restart and --restart-only exclude each other" in out
    code, out = run("up", str(cfg), "-y", "--min-workers", "3")
    assert code == 1 and "with available_node_types, set min_workers on each node type" in out
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text("cluster_name: x\nmax_workers: 2\nprovider: {type: local_process}\n")
    code, out = run("up", str(legacy), "-y", "--min-workers", "3")
    assert code == 1 and "min_workers 3 exceeds max_workers 2" in out
    code, out = run("up", str(cfg), "-n", "bad name!", "-y")
    assert code == 1 and "cluster_name" in out
