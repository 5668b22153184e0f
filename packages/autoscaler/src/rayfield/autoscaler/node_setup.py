"""Setting up, stopping and reaching the nodes of a provider whose nodes run nothing
until set up over SSH (``needs_setup``: the ``local`` provider, and any other provider
through :class:`~rayfield.autoscaler.launcher_state.SSHClusterProvider`).

:class:`NodeSetup` builds a node's :class:`~rayfield.autoscaler.command_runner.SSHCommandRunner`
(``auth.ssh_user``, ``auth.ssh_private_key``; host keys pinned in the cluster
directory's ``known_hosts`` unless ``auth.host_key_checking`` is false, see
:mod:`rayfield.autoscaler.known_hosts`), the environment of its commands and its
:class:`~rayfield.autoscaler.updater.NodeUpdater`; after the start commands it reads what
the node wrote in its newest session under ``$RAYFIELD_NODE_TEMP_DIR`` (``node.json``;
on the head also ``cluster.json`` and ``token``) and records it with the provider (and
hands the head's token to ``provider.publish_token``). Each node's output goes to
``<cluster_dir>/nodes/<node_id>/update.log`` (0600, kept through
:mod:`rayfield.util.private_files`).

A provider that reaches its nodes itself (``runs_commands``: Kubernetes, through the
exec API) needs no ``auth``: its ``command_runner`` replaces SSH, and :attr:`NodeSetup.key` is None.

``RAYFIELD_NODE_TEMP_DIR`` is ``/tmp/rayfield-<cluster_name>-<node_ip>`` on the node (one
per address, so that several nodes may share a filesystem).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rayfield.autoscaler.cluster_state import open_log
from rayfield.autoscaler.command_runner import CommandError, CommandRunner, SSHCommandRunner
from rayfield.autoscaler.launcher_state import SSHClusterProvider
from rayfield.autoscaler.local import LocalNodeProvider
from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    KIND_WORKER,
    TAG_NODE_KIND,
    TAG_NODE_TYPE,
    ProviderError,
)
from rayfield.autoscaler.updater import NodeUpdater, UpdateError, plan_update, runtime_hash
from rayfield.util import private_files

__all__ = ["NodeSetup", "resource_args"]

GCS_PORT = 6379


def resource_args(node_type: dict[str, Any]) -> str:
    """``rayfield start`` flags for a node type's resources (and ``node_config``'s
    ``object_store_memory``, bytes, when set)."""
    resources = dict(node_type.get("resources", {}))
    args = [f"--num-cpus={float(resources.pop('CPU', 1)):g}"]
    if "GPU" in resources:
        args.append(f"--num-gpus={float(resources.pop('GPU')):g}")
    if resources:
        args.append("--resources=" + json.dumps(resources, separators=(",", ":")))
    memory = node_type.get("node_config", {}).get("object_store_memory")
    if memory:
        args.append(f"--object-store-memory={int(memory)}")
    return " ".join(args)  # expanded unquoted in the commands: no spaces in any flag


class NodeSetup:
    """Sets up, stops and reaches the nodes of one SSH cluster.

    Args:
        config: a prepared config (``auth.ssh_user`` and ``auth.ssh_private_key`` set).
        provider: the cluster's provider.
        ssh_timeout_s: how long an update waits for a node's sshd.

    Raises:
        ProviderError: the nodes are reached over SSH and ``auth`` lacks the user or the
            key, or the key file is missing.
        UnsafeFileError: the key file is not this user's, or others may write it.
    """

    def __init__(
        self,
        config: dict[str, Any],
        provider: LocalNodeProvider | SSHClusterProvider,
        ssh_timeout_s: float = 120.0,
    ) -> None:
        self.config = config
        self.provider = provider
        self.ssh_timeout_s = ssh_timeout_s
        #: Each kind's runtime-config hash, taken once: the file mounts' contents as
        #: they were when this object was made (a monitor acts on the config it loaded).
        self.runtime_hashes = {k: runtime_hash(config, k) for k in (KIND_HEAD, KIND_WORKER)}
        auth = config.get("auth", {})
        #: The SSH key; None when the provider reaches its nodes itself.
        self.key: Path | None = None
        self.ssh_user = str(auth.get("ssh_user") or "")
        #: Whether SSH pins the nodes' host keys (``auth.host_key_checking``, default true).
        self.host_key_checking = bool(auth.get("host_key_checking", True))
        if provider.runs_commands:
            return
        if not auth.get("ssh_user") or not auth.get("ssh_private_key"):
            raise ProviderError(
                "an SSH cluster needs auth.ssh_user and auth.ssh_private_key (the key's path)"
            )
        self.key = Path(str(auth["ssh_private_key"])).expanduser()
        if not self.key.is_file():
            raise ProviderError(f"auth.ssh_private_key {str(self.key)!r} is not a file")
        private_files.check_owned(self.key, "auth.ssh_private_key")

    def ssh_ip(self, node_id: str) -> str | None:
        """The address SSH reaches the node at: its internal one with
        ``provider.use_internal_ips``, else its external one; None when it has none."""
        if self.config["provider"].get("use_internal_ips"):
            return self.provider.internal_ip(node_id)
        return self.provider.external_ip(node_id)

    def runner(self, node_id: str) -> CommandRunner:
        """The node's command runner: the provider's own when it has one, else SSH.

        Raises:
            ProviderError: the node has no address (it is gone, or has none yet).
        """
        if self.key is None:
            return self.provider.command_runner(node_id)
        ip = self.ssh_ip(node_id)
        if ip is None:
            raise ProviderError(f"node {node_id} has no address (terminated, or not assigned yet)")
        return SSHCommandRunner(
            ip,
            self.ssh_user,
            self.key,
            known_hosts=self.provider.known_hosts,
            host_key_checking=self.host_key_checking,
        )

    def log_path(self, node_id: str) -> Path:
        """The node's update log."""
        return self.provider.node_dir(node_id) / "update.log"

    def kind(self, node_id: str) -> str:
        """``"head"`` or ``"worker"``."""
        return self.provider.node_tags(node_id).get(TAG_NODE_KIND, KIND_WORKER)

    def env(self, node_id: str, with_secrets: bool = True) -> dict[str, str]:
        """What every command on the node gets (see the module docstring); a worker's
        includes the head's GCS address and, with ``with_secrets``, the token."""
        tags = self.provider.node_tags(node_id)
        node_ip = self.provider.internal_ip(node_id) or ""
        node_type = self.config["available_node_types"].get(tags.get(TAG_NODE_TYPE, ""), {})
        env = {
            "RAYFIELD_HEAD_IP": self.provider.head_ip or "",
            "RAYFIELD_NODE_IP": node_ip,
            "RAYFIELD_NODE_TEMP_DIR": f"/tmp/rayfield-{self.config['cluster_name']}-{node_ip}",
            "RAYFIELD_RESOURCE_ARGS": resource_args(node_type),
        }
        if tags.get(TAG_NODE_KIND) != KIND_HEAD:
            try:
                head = self.provider.head_id()
                env["RAYFIELD_ADDRESS"] = self.provider.gcs_address(head)
                if with_secrets:
                    env["RAYFIELD_TOKEN"] = self.provider.token(head)
            except ProviderError:
                if with_secrets:
                    raise
        return env

    def updater(self, node_id: str, restart_only: bool = False) -> NodeUpdater:
        """The node's updater (not run yet).

        Raises:
            ProviderError: a worker's head has not been started.
        """
        kind = self.kind(node_id)
        head = kind == KIND_HEAD
        env = self.env(node_id)
        return NodeUpdater(
            node_id,
            self.provider,
            self.runner(node_id),
            plan_update(self.config, kind, restart_only),
            env,
            self.log_path(node_id),
            self.runtime_hashes[kind],
            ssh_timeout_s=self.ssh_timeout_s,
            after_start=lambda runner: self._record(node_id, runner, env, head),
        )

    def update(self, node_id: str, restart_only: bool = False) -> None:
        """Set the node up.

        Raises:
            UpdateError: a step failed (the node is tagged ``update-failed``; the message
                points at its log).
        """
        updater = self.updater(node_id, restart_only)
        if not updater.run():
            raise UpdateError(f"setting up {node_id} failed: {updater.error}")

    def _record(self, node_id: str, runner: CommandRunner, env: dict[str, str], head: bool) -> None:
        # The node's newest session (session_latest points at a head's only).
        session = '"$(ls -d "$RAYFIELD_NODE_TEMP_DIR"/session_2* | sort | tail -n 1)"'
        try:
            node = json.loads(runner.output(f"cat {session}/node.json", env))
            info = {"cluster_node_id": str(node["node_id"])}
            if head:
                cluster = json.loads(runner.output(f"cat {session}/cluster.json", env))
                info["gcs_address"] = str(cluster["gcs_address"])
                info["token"] = runner.output(f"cat {session}/token", env).strip()
        except (ValueError, KeyError, TypeError) as exc:
            raise UpdateError(
                f"the node started but its session under {env['RAYFIELD_NODE_TEMP_DIR']} "
                f"is not readable ({exc}): do the start commands pass --temp-dir "
                '"$RAYFIELD_NODE_TEMP_DIR"?'
            ) from None
        self.provider.record_started(node_id, info)
        if head:
            self.provider.publish_token(info["token"])

    def stop(self, node_id: str) -> bool:
        """Run ``stop_ray_commands`` on the node (best effort: an unreachable node is
        logged); True when they all succeeded."""
        with open_log(self.log_path(node_id)) as log:
            log.write(b"==> stop_ray_commands\n")
            try:
                runner, env = self.runner(node_id), self.env(node_id, with_secrets=False)
            except ProviderError as exc:
                log.write(f"not stopped: {exc}\n".encode())
                return False
            ok = True
            for cmd in self.config.get("stop_ray_commands", []):
                log.write(f"$ {cmd}\n".encode())
                try:
                    ok = runner.run(cmd, env, log, timeout_s=60) == 0 and ok
                except CommandError as exc:
                    log.write(f"{exc}\n".encode())
                    ok = False
            return ok
