"""The node updater's decisions and its step machine, over a scripted command runner and
the in-memory provider: no SSH, no process."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import pytest
from conftest import MakeUpdaters, TagHistory, ssh_config

from rayfield.autoscaler.command_runner import CommandError, CommandRunner
from rayfield.autoscaler.config import prepare_config
from rayfield.autoscaler.node_provider import (
    KIND_WORKER,
    STATUS_SETTING_UP,
    STATUS_SYNCING_FILES,
    STATUS_UNINITIALIZED,
    STATUS_UP_TO_DATE,
    STATUS_UPDATE_FAILED,
    STATUS_WAITING_FOR_SSH,
    TAG_NODE_STATUS,
    TAG_RUNTIME_CONFIG,
)
from rayfield.autoscaler.updater import (
    NodeUpdater,
    file_mounts_hash,
    needs_update,
    plan_update,
    runtime_hash,
)


def test_plan_orders_the_steps_and_tags_each(tmp_path: Path) -> None:
    mount = tmp_path / "m.txt"
    mount.write_text("x")
    cfg = ssh_config(
        tmp_path,
        file_mounts={"/remote/m.txt": str(mount)},
        initialization_commands=["init"],
        setup_commands=["setup"],
        worker_setup_commands=["wsetup"],
        head_setup_commands=["hsetup"],
        worker_start_ray_commands=["wstart"],
    )
    steps = plan_update(cfg, KIND_WORKER)
    assert [(s.action, s.status, s.phase) for s in steps] == [
        ("wait_ssh", STATUS_WAITING_FOR_SSH, "wait for ssh"),
        ("sync", STATUS_SYNCING_FILES, "file_mounts"),
        ("run", STATUS_SETTING_UP, "initialization_commands"),
        ("run", STATUS_SETTING_UP, "setup_commands"),
        ("run", STATUS_SETTING_UP, "worker_setup_commands"),
        ("run", STATUS_SETTING_UP, "worker_start_ray_commands"),
    ]
    assert steps[1].mounts == (("/remote/m.txt", str(mount)),)
    assert steps[-1].commands == ("wstart",)
    # --restart-only: only the start commands, after ssh answers.
    assert [s.phase for s in plan_update(cfg, "head", restart_only=True)] == [
        "wait for ssh",
        "head_start_ray_commands",
    ]


def test_local_provider_defaults_start_rayfield_in_the_node_temp_dir(tmp_path: Path) -> None:
    cfg = ssh_config(tmp_path)
    (head_stop, head_start) = cfg["head_start_ray_commands"]
    assert "--head" in head_start and '--temp-dir="$RAYFIELD_NODE_TEMP_DIR"' in head_start
    assert head_stop == cfg["stop_ray_commands"][0]
    assert '--address="$RAYFIELD_ADDRESS"' in cfg["worker_start_ray_commands"][1]
    assert prepare_config(cfg) == cfg  # the normal form is valid input


def test_runtime_hash_follows_file_contents_and_commands(tmp_path: Path) -> None:
    d = tmp_path / "dir"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "a.py").write_text("1")
    cfg = ssh_config(tmp_path, file_mounts={"/r/dir": str(d)})
    before = runtime_hash(cfg, KIND_WORKER)
    assert runtime_hash(cfg, KIND_WORKER) == before  # deterministic
    assert runtime_hash(cfg, "head") != before  # other start commands
    (d / "sub" / "a.py").write_text("2")
    changed = runtime_hash(cfg, KIND_WORKER)
    assert changed != before
    (d / "sub" / "b.py").write_text("")
    assert runtime_hash(cfg, KIND_WORKER) != changed  # a new file counts
    cfg["setup_commands"] = ["pip install x"]
    assert runtime_hash(cfg, KIND_WORKER) != runtime_hash(ssh_config(tmp_path), KIND_WORKER)
    assert file_mounts_hash({"/r": str(tmp_path / "missing")}) != file_mounts_hash({})


@pytest.mark.parametrize(
    ("status", "tag_hash", "in_flight", "expected"),
    [
        (STATUS_UNINITIALIZED, None, False, True),  # new node
        (STATUS_UNINITIALIZED, None, True, False),  # one updater at a time
        (STATUS_UP_TO_DATE, "h", False, False),  # current
        (STATUS_UP_TO_DATE, "old", False, True),  # runtime config changed
        (STATUS_SETTING_UP, "old", False, False),  # an update is running elsewhere
        (STATUS_UPDATE_FAILED, "old", False, False),  # replaced, not retried in place
    ],
)
def test_needs_update(status: str, tag_hash: str | None, in_flight: bool, expected: bool) -> None:
    tags = {TAG_NODE_STATUS: status}
    if tag_hash:
        tags[TAG_RUNTIME_CONFIG] = tag_hash
    assert needs_update(tags, "h", in_flight) is expected


class ScriptedRunner(CommandRunner):
    """Answers ``true`` (the ssh probe) with the scripted statuses, then 0; fails the
    commands named in ``failing``; records every call."""

    def __init__(self, probes: list[int] | None = None, sync_failures: int = 0) -> None:
        self.probes = list(probes or [])
        self.sync_failures = sync_failures
        self.failing: set[str] = set()
        self.calls: list[tuple[str, Any]] = []

    def run(
        self,
        cmd: str,
        env: dict[str, str] | None = None,
        log: IO[bytes] | None = None,
        timeout_s: float | None = None,
    ) -> int:
        self.calls.append(("run", cmd))
        if cmd == "true":
            return self.probes.pop(0) if self.probes else 0
        if log is not None:
            log.write(f"ran {cmd}\n".encode())
        self.calls.append(("env", dict(env or {})))
        return 1 if cmd in self.failing else 0

    def output(self, cmd: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> str:
        return ""

    def sync_up(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        self.calls.append(("sync", (source, target)))
        if self.sync_failures:
            self.sync_failures -= 1
            raise CommandError("connection reset")

    def sync_down(self, source: str, target: str, log: IO[bytes] | None = None) -> None:
        raise AssertionError("not used")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def one_updater(
    make: MakeUpdaters, runner: ScriptedRunner, cfg: dict[str, Any], ssh_timeout_s: float = 30
) -> tuple[NodeUpdater, TagHistory]:
    clock = Clock()
    env = {"RAYFIELD_TOKEN": "s3cret-token", "RAYFIELD_NODE_IP": "10.0.0.2"}
    (updater,), provider = make(
        cfg, [runner], [env], ssh_timeout_s=ssh_timeout_s, clock=clock, sleep=clock.sleep
    )
    return updater, provider


def test_an_update_waits_for_ssh_syncs_runs_and_tags(
    tmp_path: Path, worker_updaters: MakeUpdaters
) -> None:
    mount = tmp_path / "m.txt"
    mount.write_text("x")
    cfg = ssh_config(
        tmp_path,
        file_mounts={"/r/m.txt": str(mount)},
        setup_commands=["setup"],
        worker_start_ray_commands=["start"],
    )
    runner = ScriptedRunner(probes=[255, 255], sync_failures=2)  # sshd not up yet; flaky copy
    updater, provider = one_updater(worker_updaters, runner, cfg)
    assert updater.run(), updater.error
    assert provider.statuses == [
        STATUS_WAITING_FOR_SSH,
        STATUS_SYNCING_FILES,
        STATUS_SETTING_UP,
        STATUS_SETTING_UP,
        STATUS_UP_TO_DATE,
    ]
    tags = provider.node_tags("n0")
    assert tags[TAG_RUNTIME_CONFIG] == runtime_hash(cfg, KIND_WORKER)
    ran = [c for kind, c in runner.calls if kind == "run" and c != "true"]
    assert ran == ["setup", "start"]
    assert [c for kind, c in runner.calls if kind == "run"].count("true") == 3
    assert [c for kind, c in runner.calls if kind == "sync"] == [(str(mount), "/r/m.txt")] * 3
    assert all(c["RAYFIELD_TOKEN"] == "s3cret-token" for kind, c in runner.calls if kind == "env")
    log = updater.log_path.read_text()
    assert "ran setup" in log and "==> up-to-date" in log
    assert "s3cret-token" not in log  # the environment is never logged
    assert oct(updater.log_path.stat().st_mode & 0o777) == "0o600"


def test_a_failing_command_fails_the_update_and_stops_it(
    tmp_path: Path, worker_updaters: MakeUpdaters
) -> None:
    cfg = ssh_config(tmp_path, setup_commands=["bad", "never"], worker_start_ray_commands=["s"])
    runner = ScriptedRunner()
    runner.failing.add("bad")
    updater, provider = one_updater(worker_updaters, runner, cfg)
    assert not updater.run()
    assert provider.statuses[-1] == STATUS_UPDATE_FAILED
    assert TAG_RUNTIME_CONFIG not in provider.node_tags("n0")
    assert "'bad' exited with status 1" in (updater.error or "")
    assert str(updater.log_path) in (updater.error or "")
    assert ("run", "never") not in runner.calls


def test_ssh_that_never_answers_fails_after_the_timeout(
    tmp_path: Path, worker_updaters: MakeUpdaters
) -> None:
    runner = ScriptedRunner(probes=[255] * 1000)
    updater, provider = one_updater(worker_updaters, runner, ssh_config(tmp_path), ssh_timeout_s=5)
    assert not updater.run()
    assert provider.statuses == [STATUS_WAITING_FOR_SSH, STATUS_UPDATE_FAILED]
    assert "did not answer ssh within 5 s" in (updater.error or "")
    assert 5 <= [c for _, c in runner.calls].count("true") <= 7


def test_a_missing_local_mount_fails_the_update(
    tmp_path: Path, worker_updaters: MakeUpdaters
) -> None:
    cfg = ssh_config(tmp_path, file_mounts={"/r/x": str(tmp_path / "nope")})
    updater, provider = one_updater(worker_updaters, ScriptedRunner(), cfg)
    assert not updater.run()
    assert "local path" in (updater.error or "") and provider.statuses[-1] == STATUS_UPDATE_FAILED
