"""The ``kubernetes`` provider: each node is a Pod, through the official ``kubernetes``
client (the ``[kubernetes]`` extra).

A node's id is its pod's name (``rayfield-<cluster>-<kind>-<suffix>``, made by the API
server from ``generateName``); the node config is the Pod manifest (``metadata``,
``spec``; the ``resources`` key of the node type is not sent). Tags are the pod's
labels, with ``rayfield-cluster-name: <cluster>`` added (and left out of
:meth:`KubernetesNodeProvider.node_tags`); so tag values must be valid label values
(at most 63 letters, digits, ``-``, ``_``, ``.``), which the launcher's tags are. Pods
run what their manifest says: the head's container runs ``rayfield start --head``, a
worker's ``rayfield start --address=...``, or they wait (``sleep infinity``) and the
launcher sets them up through the Kubernetes exec API, never SSH
(:meth:`KubernetesNodeProvider.command_runner`:
:class:`~rayfield.autoscaler.providers.kubernetes_runner.KubernetesCommandRunner`,
``provider.command_runner: api`` or ``kubectl``, in ``provider.container``); see
``examples/kubernetes.yaml``.

**The cluster token.** The head makes it when it starts; the launcher reads it from the
head's session and :meth:`KubernetesNodeProvider.publish_token` keeps it in the Secret
``rayfield-<cluster>-token`` (key ``token``), which every worker pod's containers read
as ``RAYFIELD_TOKEN`` through ``valueFrom.secretKeyRef`` (added by the bootstrap): the
token is in no label, annotation, command line or log. ``down`` deletes the Secret
(:meth:`KubernetesNodeProvider.remove_cluster`); the next ``up`` stores the new head's.

The client is configured as ``kubectl`` is: inside a cluster from the pod's service
account, elsewhere from ``$KUBECONFIG`` (default ``~/.kube/config``), current context.
``create_node`` waits until the pods run (at most :data:`RUNNING_TIMEOUT_S`). Labels are
changed with a JSON patch (the client would send a dict as one, which the API server
refuses).

:meth:`KubernetesNodeProvider.bootstrap_config`
(:mod:`rayfield.autoscaler.providers.kubernetes_bootstrap`) gives the head pod a
service account allowed to manage the namespace's pods (so that the monitor on the head
launches workers) and makes a Service naming the head, ``rayfield-<cluster>-head``.

Sources:
    Ray 0.8 ``autoscaler/kubernetes/node_provider.py`` (spec 5.2); the Kubernetes Pod API
    (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/).
"""

from __future__ import annotations

import base64
import copy
import time
from typing import Any

from rayfield.autoscaler.command_runner import CommandRunner
from rayfield.autoscaler.provider_base import (
    TAG_CLUSTER_NAME,
    TAG_NODE_KIND,
    NodeProvider,
    ProviderError,
)
from rayfield.autoscaler.providers.kubernetes_api import api_client

__all__ = ["RUNNING_TIMEOUT_S", "KubernetesNodeProvider", "api_client"]

RUNNING_TIMEOUT_S = 600.0
_GONE_PHASES = ("Succeeded", "Failed")


def _why(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or type(exc).__name__
    return f"HTTP {status} {reason}" if status else str(reason)


class KubernetesNodeProvider(NodeProvider):
    """Pods as nodes (see the module docstring).

    Args:
        provider_config: ``type: kubernetes``, ``namespace`` (default ``default``).
        cluster_name: the value of every pod's ``rayfield-cluster-name`` label.

    Raises:
        ProviderError: the client is not installed or finds no cluster configuration.
    """

    #: Seconds between two looks at a new pod's phase in ``create_node``.
    running_poll_s = 1.0
    #: Nodes are reached through the exec API (:meth:`command_runner`), not SSH.
    runs_commands = True

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self.namespace = str(provider_config.get("namespace") or "default")
        self.api_client = api_client(provider_config)  # ProviderError without the client
        from kubernetes import client

        self.core = client.CoreV1Api(self.api_client)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # kubernetes.client.ApiException, urllib3 errors
            if getattr(exc, "status", None) == 404:
                return None
            raise ProviderError(
                f"Kubernetes refused to {what} in namespace {self.namespace!r} ({_why(exc)})"
            ) from None

    def _pod(self, node_id: str) -> Any:
        pod = self._call("read a pod", self.core.read_namespaced_pod, node_id, self.namespace)
        labels = (pod.metadata.labels or {}) if pod else {}
        return pod if labels.get(TAG_CLUSTER_NAME) == self.cluster_name else None

    @staticmethod
    def _live(pod: Any) -> bool:
        return pod.metadata.deletion_timestamp is None and pod.status.phase not in _GONE_PHASES

    @classmethod
    def bootstrap_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        """A copy of the prepared ``config`` whose head pod runs as a service account
        allowed to manage the namespace's pods, with a Service naming the head
        (:func:`rayfield.autoscaler.providers.kubernetes_bootstrap.bootstrap_kubernetes`).

        Raises:
            ProviderError: the API server refused a call.
        """
        from rayfield.autoscaler.providers.kubernetes_bootstrap import bootstrap_kubernetes

        cfg = copy.deepcopy(config)
        return bootstrap_kubernetes(cls(cfg["provider"], cfg["cluster_name"]), cfg)

    # ---- NodeProvider ------------------------------------------------------------------

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        wanted = {TAG_CLUSTER_NAME: self.cluster_name, **tag_filters}
        selector = ",".join(f"{k}={v}" for k, v in sorted(wanted.items()))
        pods = self._call(
            "list pods", self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )
        items = pods.items if pods else []
        return sorted(p.metadata.name for p in items if self._live(p))

    def is_running(self, node_id: str) -> bool:
        pod = self._pod(node_id)
        return pod is not None and self._live(pod) and pod.status.phase == "Running"

    def is_terminated(self, node_id: str) -> bool:
        pod = self._pod(node_id)
        return pod is None or not self._live(pod)

    def node_tags(self, node_id: str) -> dict[str, str]:
        pod = self._pod(node_id)
        if pod is None:
            raise ProviderError(f"cluster {self.cluster_name!r} has no pod {node_id!r}")
        return {k: v for k, v in (pod.metadata.labels or {}).items() if k != TAG_CLUSTER_NAME}

    def external_ip(self, node_id: str) -> str | None:
        return self.internal_ip(node_id)

    def internal_ip(self, node_id: str) -> str | None:
        pod = self._pod(node_id)
        return pod.status.pod_ip if pod is not None else None

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        self.node_tags(node_id)  # ProviderError when unknown
        patch = [
            {
                "op": "add",
                "path": "/metadata/labels/" + k.replace("~", "~0").replace("/", "~1"),
                "value": str(v),
            }
            for k, v in tags.items()
        ]
        self._call("label a pod", self.core.patch_namespaced_pod, node_id, self.namespace, patch)

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        manifest = copy.deepcopy({k: v for k, v in node_config.items() if k != "resources"})
        meta = manifest.setdefault("metadata", {})
        meta.pop("name", None)
        kind = tags.get(TAG_NODE_KIND, "node")
        meta["generateName"] = f"rayfield-{self.cluster_name}-{kind}-".lower().replace("_", "-")
        meta["labels"] = {
            **meta.get("labels", {}),
            **{k: str(v) for k, v in tags.items()},
            TAG_CLUSTER_NAME: self.cluster_name,
        }
        manifest.setdefault("apiVersion", "v1")
        manifest.setdefault("kind", "Pod")
        names = []
        for _ in range(count):
            pod = self._call(
                "create a pod", self.core.create_namespaced_pod, self.namespace, manifest
            )
            if pod is None:
                raise ProviderError(f"namespace {self.namespace!r} does not exist: create it first")
            names.append(pod.metadata.name)
        deadline = time.monotonic() + RUNNING_TIMEOUT_S
        for name in names:
            while not self.is_running(name):
                pod = self._pod(name)
                if pod is None or not self._live(pod) or time.monotonic() > deadline:
                    phase = pod.status.phase if pod is not None else "deleted"
                    raise ProviderError(
                        f"pod {name} did not reach Running (phase {phase}): "
                        f"see kubectl -n {self.namespace} describe pod {name}"
                    )
                time.sleep(self.running_poll_s)

    def terminate_node(self, node_id: str) -> None:
        if self._pod(node_id) is not None:
            self._call("delete a pod", self.core.delete_namespaced_pod, node_id, self.namespace)

    def cleanup(self) -> None:
        self.api_client.close()

    def command_runner(self, node_id: str) -> CommandRunner:
        """The pod's runner through the exec API: ``provider.command_runner`` (``api``,
        default, or ``kubectl``), in ``provider.container`` (default the pod's first).

        Raises:
            ProviderError: ``provider.command_runner`` names no transport.
        """
        from rayfield.autoscaler.providers.kubernetes_runner import KubernetesCommandRunner

        transport = str(self.provider_config.get("command_runner") or "api")
        try:
            return KubernetesCommandRunner(
                self.namespace,
                node_id,
                self.provider_config.get("container"),
                transport,
                self.provider_config,
            )
        except ValueError as exc:
            raise ProviderError(str(exc)) from None

    def publish_token(self, token: str) -> None:
        """Keep ``token`` in the Secret the worker pods read (made, or replaced when it
        holds another cluster token).

        Raises:
            ProviderError: the API server refused (the message has the HTTP status).
        """
        from rayfield.autoscaler.providers.kubernetes_bootstrap import token_secret_name

        name = token_secret_name(self.cluster_name)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "labels": {TAG_CLUSTER_NAME: self.cluster_name}},
            "data": {"token": base64.b64encode(token.encode()).decode()},
        }
        found = self._call("read a secret", self.core.read_namespaced_secret, name, self.namespace)
        if found is None:
            self._call("create a secret", self.core.create_namespaced_secret, self.namespace, body)
        elif (found.data or {}).get("token") != body["data"]["token"]:
            self._call(
                "replace a secret", self.core.replace_namespaced_secret, name, self.namespace, body
            )

    def remove_cluster(self) -> None:
        """Delete the token's Secret (already gone is not an error)."""
        from rayfield.autoscaler.providers.kubernetes_bootstrap import token_secret_name

        name = token_secret_name(self.cluster_name)
        self._call("delete a secret", self.core.delete_namespaced_secret, name, self.namespace)
