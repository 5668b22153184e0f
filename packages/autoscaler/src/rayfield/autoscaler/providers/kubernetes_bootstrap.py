"""``bootstrap_kubernetes``: what a ``kubernetes`` cluster needs in its namespace
beyond its pods, made when missing (an object that exists is left as it is).

- **The head's account**: a ServiceAccount ``rayfield-<cluster>-autoscaler``, a Role of
  the same name allowed :data:`POD_VERBS` on the namespace's pods (what the provider
  does, nothing more: no other resource, no other namespace) and a RoleBinding giving
  that Role to the account. The head pod runs as it (``spec.serviceAccountName``, set
  unless the head's manifest names an account; a named account is bound to the Role
  instead, and must exist). Inside the head pod the client configures itself from the
  account's token that Kubernetes mounts there, so the monitor on the head creates and
  deletes worker pods with no credential copied from the launching machine.
- **The head's Service** ``rayfield-<cluster>-head``: headless (``clusterIP: None``),
  selecting the head pod by its labels (``rayfield-cluster-name``,
  ``rayfield-node-kind: head``), port 6379 (``gcs``) listed. Its DNS name resolves to
  the head pod's own address, so a worker pod reaches every port of the head at
  ``rayfield-<cluster>-head:6379`` inside the namespace
  (``rayfield-<cluster>-head.<namespace>.svc`` from elsewhere).
- **The workers' token**: every container of every worker node type gets
  ``RAYFIELD_TOKEN`` from the Secret ``rayfield-<cluster>-token`` (key ``token``)
  through ``valueFrom.secretKeyRef`` (a container that sets ``RAYFIELD_TOKEN`` itself
  is left as it is). The Secret is made later, once the head started and reported the
  token (``KubernetesNodeProvider.publish_token``); the kubelet starts a worker's
  containers only once it exists. The head makes the token, so it gets none.
- The Role also allows ``create`` and ``get`` on ``pods/exec``: the monitor on the head
  sets workers up through the exec API. It allows nothing on Secrets.

Sources:
    Ray 0.8 ``autoscaler/kubernetes/config.py`` (service account, role, binding); the
    Kubernetes RBAC and Service APIs
    (https://kubernetes.io/docs/reference/access-authn-authz/rbac/,
    https://kubernetes.io/docs/concepts/services-networking/service/#headless-services).
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

from rayfield.autoscaler.provider_base import (
    KIND_HEAD,
    TAG_CLUSTER_NAME,
    TAG_NODE_KIND,
    ProviderError,
)

__all__ = [
    "EXEC_VERBS",
    "GCS_PORT",
    "POD_VERBS",
    "account_name",
    "bootstrap_kubernetes",
    "head_service_name",
    "token_secret_name",
    "with_token_env",
]

logger = logging.getLogger(__name__)

#: What the provider does with pods: read, list (and watch), create, label, delete.
POD_VERBS = ("get", "list", "watch", "create", "patch", "delete")
#: What the exec runner does with ``pods/exec`` (websocket exec is authorized as either,
#: by Kubernetes version).
EXEC_VERBS = ("create", "get")
GCS_PORT = 6379
_RBAC_GROUP = "rbac.authorization.k8s.io"


def _dns_label(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.lower())[:63].strip("-")


def account_name(cluster_name: str) -> str:
    """The head's ServiceAccount (also its Role's and RoleBinding's name)."""
    return _dns_label(f"rayfield-{cluster_name}-autoscaler")


def head_service_name(cluster_name: str) -> str:
    """The Service naming the head (its DNS name inside the namespace)."""
    return _dns_label(f"rayfield-{cluster_name}-head")


def token_secret_name(cluster_name: str) -> str:
    """The Secret holding the cluster token (key ``token``)."""
    return _dns_label(f"rayfield-{cluster_name}-token")


def with_token_env(pod_manifest: dict[str, Any], secret: str) -> dict[str, Any]:
    """A copy of ``pod_manifest`` whose containers read ``RAYFIELD_TOKEN`` from the
    Secret ``secret`` (key ``token``), unless one sets it already. Pure."""
    out = copy.deepcopy(pod_manifest)
    ref = {"secretKeyRef": {"name": secret, "key": "token"}}
    for container in out.get("spec", {}).get("containers", []):
        env = container.setdefault("env", [])
        if not any(var.get("name") == "RAYFIELD_TOKEN" for var in env):
            env.append({"name": "RAYFIELD_TOKEN", "valueFrom": copy.deepcopy(ref)})
    return out


def bootstrap_kubernetes(provider: Any, config: dict[str, Any]) -> dict[str, Any]:
    """A copy of the prepared ``config`` whose head pod runs as the autoscaler's
    account and whose worker pods read the token's Secret, with the account, its Role
    and RoleBinding and the head's Service made (see the module docstring).

    Args:
        provider: the cluster's ``KubernetesNodeProvider`` (its client and namespace).
        config: a prepared ``kubernetes`` config.

    Raises:
        ProviderError: the API server refused a call (the message has the HTTP status).
    """
    from kubernetes import client

    cfg = copy.deepcopy(config)
    ns, cluster = provider.namespace, provider.cluster_name
    secret = token_secret_name(cluster)
    for type_name, node_type in cfg["available_node_types"].items():
        if type_name != cfg["head_node_type"]:
            node_type["node_config"] = with_token_env(node_type.get("node_config", {}), secret)
    core = client.CoreV1Api(provider.api_client)
    rbac = client.RbacAuthorizationV1Api(provider.api_client)
    name = account_name(cluster)
    spec = cfg["available_node_types"][cfg["head_node_type"]]["node_config"].setdefault("spec", {})
    account = str(spec.setdefault("serviceAccountName", name))
    labels = {TAG_CLUSTER_NAME: cluster}
    meta = {"name": name, "namespace": ns, "labels": labels}
    if account == name:
        _ensure(
            provider,
            "service account",
            name,
            core.read_namespaced_service_account,
            core.create_namespaced_service_account,
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        )
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": list(POD_VERBS)},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": list(EXEC_VERBS)},
    ]
    _ensure(
        provider,
        "role",
        name,
        rbac.read_namespaced_role,
        rbac.create_namespaced_role,
        {"apiVersion": f"{_RBAC_GROUP}/v1", "kind": "Role", "metadata": meta, "rules": rules},
    )
    _ensure(
        provider,
        "role binding",
        name,
        rbac.read_namespaced_role_binding,
        rbac.create_namespaced_role_binding,
        {
            "apiVersion": f"{_RBAC_GROUP}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
            "roleRef": {"apiGroup": _RBAC_GROUP, "kind": "Role", "name": name},
        },
    )
    service = head_service_name(cluster)
    _ensure(
        provider,
        "service",
        service,
        core.read_namespaced_service,
        core.create_namespaced_service,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": ns, "labels": labels},
            "spec": {
                "clusterIP": "None",
                "selector": {TAG_CLUSTER_NAME: cluster, TAG_NODE_KIND: KIND_HEAD},
                "ports": [{"name": "gcs", "port": GCS_PORT, "targetPort": GCS_PORT}],
            },
        },
    )
    return cfg


def _ensure(provider: Any, what: str, name: str, read: Any, create: Any, body: Any) -> None:
    """Create the object ``name`` from ``body`` unless it exists (404 on read)."""
    ns = provider.namespace
    if provider._call(f"read {what} {name}", read, name, ns) is not None:
        return
    if provider._call(f"create {what} {name}", create, ns, body) is None:
        raise ProviderError(f"namespace {ns!r} does not exist: create it first")
    logger.info("created %s %s in namespace %s", what, name, ns)
