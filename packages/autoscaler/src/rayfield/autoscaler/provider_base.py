"""The ``NodeProvider`` interface every provider implements, ``ProviderError`` and the
node tags; the providers (``local``, ``local_process``, the clouds') import them from
here, and :mod:`rayfield.autoscaler.node_provider` (the registry of provider types, which
imports the built-in providers) exports them too.

Call order: the launcher and the monitor build one provider per cluster
(``get_node_provider(config["provider"], config["cluster_name"])``), then list nodes with
:meth:`NodeProvider.non_terminated_nodes`, read and write their tags, create nodes with
:meth:`NodeProvider.create_node` and remove them with :meth:`NodeProvider.terminate_node`;
:meth:`NodeProvider.cleanup` ends the provider's use.

Sources:
    Ray 0.7 ``NodeProvider`` and ``tags.py`` (spec 5.2).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.autoscaler.command_runner import CommandRunner

__all__ = [
    "STATUS_SETTING_UP",
    "STATUS_SYNCING_FILES",
    "STATUS_UNINITIALIZED",
    "STATUS_UPDATE_FAILED",
    "STATUS_UP_TO_DATE",
    "STATUS_WAITING_FOR_SSH",
    "TAG_CLUSTER_NAME",
    "TAG_LAUNCH_CONFIG",
    "TAG_NODE_KIND",
    "TAG_NODE_NAME",
    "TAG_NODE_STATUS",
    "TAG_NODE_TYPE",
    "TAG_RUNTIME_CONFIG",
    "NodeProvider",
    "ProviderError",
]

# Tag keys (the reference's ``ray-*`` tags under this project's name).
TAG_NODE_NAME = "rayfield-node-name"
TAG_NODE_KIND = "rayfield-node-kind"  # "head" or "worker"
TAG_NODE_TYPE = "rayfield-user-node-type"  # a key of available_node_types
TAG_NODE_STATUS = "rayfield-node-status"
TAG_CLUSTER_NAME = "rayfield-cluster-name"
TAG_LAUNCH_CONFIG = "rayfield-launch-config"
TAG_RUNTIME_CONFIG = "rayfield-runtime-config"

STATUS_UNINITIALIZED = "uninitialized"
STATUS_WAITING_FOR_SSH = "waiting-for-ssh"
STATUS_SYNCING_FILES = "syncing-files"
STATUS_SETTING_UP = "setting-up"
STATUS_UP_TO_DATE = "up-to-date"
STATUS_UPDATE_FAILED = "update-failed"

KIND_HEAD = "head"
KIND_WORKER = "worker"


class ProviderError(RuntimeError):
    """A provider could not do what was asked; the message says what and why."""


class NodeProvider(abc.ABC):
    """Creates, lists, tags and terminates the nodes of one cluster.

    Nodes are namespaced by ``cluster_name``; each is pending, running or terminated.

    Args:
        provider_config: the config's ``provider`` section (defaults filled).
        cluster_name: the config's ``cluster_name``.
    """

    #: True when a created node runs nothing until it is set up over SSH
    #: (:class:`~rayfield.autoscaler.node_setup.NodeSetup`); its nodes are created with
    #: status ``uninitialized``.
    needs_setup = False
    #: True when :meth:`command_runner` reaches the nodes (the launcher then needs no
    #: SSH user or key for them).
    runs_commands = False

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        self.provider_config = provider_config
        self.cluster_name = cluster_name

    @abc.abstractmethod
    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        """Ids of the pending and running nodes whose tags include ``tag_filters``."""

    @abc.abstractmethod
    def is_running(self, node_id: str) -> bool:
        """True when the node runs (it was created and has not stopped)."""

    @abc.abstractmethod
    def is_terminated(self, node_id: str) -> bool:
        """True when the node is gone (terminated, or never existed)."""

    @abc.abstractmethod
    def node_tags(self, node_id: str) -> dict[str, str]:
        """The node's tags.

        Raises:
            ProviderError: no such node.
        """

    @abc.abstractmethod
    def external_ip(self, node_id: str) -> str | None:
        """The address others reach the node at; None when it has none."""

    @abc.abstractmethod
    def internal_ip(self, node_id: str) -> str | None:
        """The node's address inside the cluster; None when it has none yet."""

    @abc.abstractmethod
    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        """Create ``count`` nodes from ``node_config``, tagged ``tags``.

        Raises:
            ProviderError: a node could not be created.
        """

    @abc.abstractmethod
    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        """Merge ``tags`` into the node's tags.

        Raises:
            ProviderError: no such node.
        """

    @abc.abstractmethod
    def terminate_node(self, node_id: str) -> None:
        """Stop the node and forget it; a node already gone is not an error."""

    def terminate_nodes(self, node_ids: list[str]) -> None:
        """Terminate each of ``node_ids`` (in order)."""
        for node_id in node_ids:
            self.terminate_node(node_id)

    def cluster_node_id(self, node_id: str) -> str | None:
        """The node's id in the rayfield cluster (hex), when the provider knows it; None
        otherwise (the autoscaler then treats the node as pending)."""
        return None

    def cleanup(self) -> None:  # noqa: B027  (optional hook: nothing to release by default)
        """Release what the provider holds (connections, caches)."""

    def command_runner(self, node_id: str) -> CommandRunner:
        """A runner reaching the node through the provider's own channel (with
        :attr:`runs_commands`; e.g. the Kubernetes exec API). The default has none.

        Raises:
            ProviderError: the provider reaches no node itself (the launcher uses SSH).
        """
        raise ProviderError(f"{type(self).__name__} runs no commands itself: nodes use SSH")

    def publish_token(self, token: str) -> None:  # noqa: B027  (optional hook)
        """Keep the cluster ``token`` (which the head made when it started) where nodes
        started later read it (Kubernetes: a Secret their pods' env reference). Called
        by the launcher once the head reported it. The default keeps nothing: the
        launcher hands the token to each node it sets up, on the command's stdin."""

    def remove_cluster(self) -> None:  # noqa: B027  (optional hook)
        """Delete what :meth:`publish_token` kept; called by ``down`` once the head is
        terminated. The default has nothing to delete."""

    @classmethod
    def bootstrap_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        """The prepared ``config`` with what this provider fills in (keys, security
        groups, IAM profiles, subnets), creating those resources when missing; called
        once before the cluster's first node is created. The default returns ``config``.

        Raises:
            ProviderError: a resource could not be created or found.
        """
        return config
