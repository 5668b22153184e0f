"""Node setup: the ``NodeUpdater`` that brings a node from ``uninitialized`` to
``up-to-date`` over a :class:`~rayfield.autoscaler.command_runner.CommandRunner` (SSH),
and the pure decisions it follows.

An update is a plan of steps (:func:`plan_update`), each with the node status tag it
sets while it runs (spec 5.2)::

    waiting-for-ssh   wait until the node answers (retried until ssh_timeout_s)
    syncing-files     file_mounts, remote path <- local path (retried 3 times)
    setting-up        initialization_commands, setup_commands, head/worker_setup_commands
    setting-up        head/worker_start_ray_commands
    up-to-date        (or update-failed, with the reason in the node's update.log)

``--restart-only`` keeps only the start commands. Whether a node needs an update is
:func:`needs_update`: a new node (``uninitialized``), or one whose runtime-config hash
tag (:func:`runtime_hash`: the commands and the *contents* of the file mounts) differs
from the config's. Every command gets ``RAYFIELD_HEAD_IP``, ``RAYFIELD_NODE_IP``,
``RAYFIELD_NODE_TEMP_DIR`` and ``RAYFIELD_RESOURCE_ARGS`` (``--num-cpus ...`` from the
node type's resources); a worker's also get ``RAYFIELD_ADDRESS`` (the head's GCS) and
``RAYFIELD_TOKEN``, sent over the SSH session's stdin, never written to the log.

Sources:
    Ray 0.7 ``updater.py`` (the steps and status tags) and ``autoscaler.py``
    (``should_update``: the runtime hash), spec 5.2.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rayfield.autoscaler.cluster_state import open_log
from rayfield.autoscaler.command_runner import CommandError, CommandRunner
from rayfield.autoscaler.known_hosts import HOST_KEY_REFUSED
from rayfield.autoscaler.node_provider import (
    STATUS_SETTING_UP,
    STATUS_SYNCING_FILES,
    STATUS_UNINITIALIZED,
    STATUS_UP_TO_DATE,
    STATUS_UPDATE_FAILED,
    STATUS_WAITING_FOR_SSH,
    TAG_NODE_STATUS,
    TAG_RUNTIME_CONFIG,
    NodeProvider,
)
from rayfield.util import private_files

__all__ = [
    "NodeUpdater",
    "Step",
    "UpdateError",
    "file_mounts_hash",
    "needs_update",
    "plan_update",
    "runtime_hash",
]

SYNC_ATTEMPTS = 3


class UpdateError(RuntimeError):
    """A node's update failed; the message names the step and the node's log."""


@dataclass(frozen=True)
class Step:
    """One step of an update.

    Attributes:
        action: ``"wait_ssh"``, ``"sync"`` (``mounts``) or ``"run"`` (``commands``).
        status: the node status tag while the step runs.
        phase: a name for the log (``"setup_commands"``, ...).
        commands: bash command lines, run in order (``"run"``).
        mounts: ``(remote_path, local_path)`` pairs (``"sync"``).
    """

    action: str
    status: str
    phase: str
    commands: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _hash_path(h: Any, path: Path) -> None:
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.is_file():
                h.update(str(child.relative_to(path)).encode() + b"\0")
                h.update(child.read_bytes())
    elif path.is_file():
        h.update(path.read_bytes())
    else:
        h.update(b"<missing>")


def file_mounts_hash(file_mounts: Mapping[str, str]) -> str:
    """Hash of the file mounts: each remote path with the contents of its local file or
    directory (file names and bytes), so a changed file changes it; a missing local
    path hashes as missing."""
    h = hashlib.sha256()
    for remote, local in sorted(file_mounts.items()):
        h.update(remote.encode() + b"\0" + local.encode() + b"\0")
        _hash_path(h, Path(local).expanduser())
    return h.hexdigest()[:16]


def runtime_hash(config: dict[str, Any], kind: str) -> str:
    """Hash of what setting up a node of ``kind`` (``"head"``/``"worker"``) runs: its
    command lists and the file mounts' contents. A node whose runtime-config tag differs
    is set up again."""
    keys = ["initialization_commands", "setup_commands"]
    keys += [f"{kind}_setup_commands", f"{kind}_start_ray_commands"]
    payload = {k: config.get(k, []) for k in keys}
    payload["file_mounts"] = file_mounts_hash(config.get("file_mounts", {}))
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def plan_update(config: dict[str, Any], kind: str, restart_only: bool = False) -> list[Step]:
    """The steps that set up a node of ``kind`` (``"head"`` or ``"worker"``).

    Args:
        config: a prepared config.
        kind: the node's kind.
        restart_only: only wait for SSH and run the start commands.
    """
    steps = [Step("wait_ssh", STATUS_WAITING_FOR_SSH, "wait for ssh")]
    start = Step(
        "run",
        STATUS_SETTING_UP,
        f"{kind}_start_ray_commands",
        tuple(config.get(f"{kind}_start_ray_commands", [])),
    )
    if restart_only:
        return [*steps, start]
    mounts = tuple(sorted(config.get("file_mounts", {}).items()))
    if mounts:
        steps.append(Step("sync", STATUS_SYNCING_FILES, "file_mounts", mounts=mounts))
    for phase in ("initialization_commands", "setup_commands", f"{kind}_setup_commands"):
        if config.get(phase):
            steps.append(Step("run", STATUS_SETTING_UP, phase, tuple(config[phase])))
    return [*steps, start]


def needs_update(tags: Mapping[str, str], current_runtime_hash: str, in_flight: bool) -> bool:
    """Whether a node gets an updater now: not while one runs for it, never after it
    failed (the autoscaler replaces such nodes), else when it is new or its
    runtime-config hash is not the current one."""
    status = tags.get(TAG_NODE_STATUS, STATUS_UNINITIALIZED)
    if in_flight or status == STATUS_UPDATE_FAILED:
        return False
    if status == STATUS_UNINITIALIZED:
        return True
    return status == STATUS_UP_TO_DATE and tags.get(TAG_RUNTIME_CONFIG) != current_runtime_hash


class NodeUpdater:
    """Runs one node's update plan and keeps its status tag current.

    Args:
        node_id: the provider's node id.
        provider: sets the node's status tags.
        runner: reaches the node.
        steps: from :func:`plan_update`.
        env: exported for every command (see the module docstring); values are never
            logged.
        log_path: the node's update log (appended; created 0600).
        runtime_config_hash: tagged on the node once it is up to date.
        ssh_timeout_s: how long to wait for the node to answer.
        after_start: called with the runner once the start commands succeeded (reads
            what the node wrote, e.g. its node id); its errors fail the update.
        clock, sleep: for tests.
    """

    def __init__(
        self,
        node_id: str,
        provider: NodeProvider,
        runner: CommandRunner,
        steps: list[Step],
        env: dict[str, str],
        log_path: Path,
        runtime_config_hash: str,
        ssh_timeout_s: float = 120.0,
        after_start: Callable[[CommandRunner], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.node_id = node_id
        self.provider = provider
        self.runner = runner
        self.steps = steps
        self.env = env
        self.log_path = log_path
        self.runtime_config_hash = runtime_config_hash
        self.ssh_timeout_s = ssh_timeout_s
        self.after_start = after_start
        self.clock = clock
        self.sleep = sleep
        self.error: str | None = None

    def run(self) -> bool:
        """Run the update; True when the node is up to date. On failure the node is
        tagged ``update-failed`` and :attr:`error` says why (the log has the output)."""
        with open_log(self.log_path) as log:
            try:
                for step in self.steps:
                    self.provider.set_node_tags(self.node_id, {TAG_NODE_STATUS: step.status})
                    log.write(f"==> {step.phase} ({step.status})\n".encode())
                    self._step(step, log)
                if self.after_start is not None:
                    self.after_start(self.runner)
            except (UpdateError, CommandError) as exc:
                self.error = f"{exc}; see {self.log_path}"
                log.write(f"==> update-failed: {exc}\n".encode())
                self.provider.set_node_tags(self.node_id, {TAG_NODE_STATUS: STATUS_UPDATE_FAILED})
                return False
            log.write(b"==> up-to-date\n")
        self.provider.set_node_tags(
            self.node_id,
            {TAG_NODE_STATUS: STATUS_UP_TO_DATE, TAG_RUNTIME_CONFIG: self.runtime_config_hash},
        )
        return True

    def _step(self, step: Step, log: Any) -> None:
        if step.action == "wait_ssh":
            self._wait_ssh(log)
        elif step.action == "sync":
            for remote, local in step.mounts:
                self._sync(remote, local, log)
        else:
            for cmd in step.commands:
                log.write(f"$ {cmd}\n".encode())
                status = self.runner.run(cmd, self.env, log)
                if status != 0:
                    raise UpdateError(f"{step.phase}: {cmd!r} exited with status {status}")

    def _wait_ssh(self, log: Any) -> None:
        deadline = self.clock() + self.ssh_timeout_s
        attempt = 0
        while True:
            attempt += 1
            since = os.fstat(log.fileno()).st_size
            if self.runner.run("true", log=log, timeout_s=15) == 0:
                log.write(f"ssh answered (attempt {attempt})\n".encode())
                return
            refused = self._host_key_refused(since)
            if refused is not None:  # waiting longer does not change the key
                raise UpdateError(refused)
            if self.clock() >= deadline:
                raise UpdateError(
                    f"the node did not answer ssh within {self.ssh_timeout_s:g} s "
                    f"({attempt} attempts): check its address, sshd, ssh_user and the key"
                )
            self.sleep(1.0)

    def _host_key_refused(self, since: int) -> str | None:
        """Why ssh refused the node's host key, when its output in the log after offset
        ``since`` says so (:data:`~rayfield.autoscaler.known_hosts.HOST_KEY_REFUSED`);
        None otherwise."""
        with private_files.open_private(self.log_path, "rb") as f:
            f.seek(since)
            text = f.read(1 << 16).decode(errors="replace")
        if HOST_KEY_REFUSED not in text:
            return None
        ip = getattr(self.runner, "ip", "the node")
        known = getattr(self.runner, "known_hosts", None) or "~/.ssh/known_hosts"
        return (
            f"ssh refused the host key of {ip}: it is not the key recorded for that address "
            f"in {known} ({HOST_KEY_REFUSED}). If the machine was replaced, remove the old "
            f"key (ssh-keygen -R {ip} -f {known}) and run again; if not, another machine may "
            "be answering at its address"
        )

    def _sync(self, remote: str, local: str, log: Any) -> None:
        path = Path(local).expanduser()
        if not path.exists():
            raise UpdateError(f"file_mounts: the local path {local!r} (for {remote!r}) is missing")
        for attempt in range(1, SYNC_ATTEMPTS + 1):
            try:
                self.runner.sync_up(str(path), remote, log)
                return
            except CommandError as exc:
                log.write(f"attempt {attempt}: {exc}\n".encode())
                if attempt == SYNC_ATTEMPTS:
                    raise
                self.sleep(1.0)
