"""The ``gcp`` provider: each node is a Compute Engine instance, through
``google-api-python-client`` (the ``[gcp]`` extra).

A node's id is its instance name (``rayfield-<cluster>-<kind>-<8 hex>``) in
``provider.availability_zone`` of ``provider.project_id``. Tags are the instance's
labels, with ``rayfield-cluster-name: <cluster>`` added (and left out of
:meth:`GCPNodeProvider.node_tags`); label keys and values are what Compute Engine
allows (lower-case letters, digits, ``-``, ``_``; at most 63): a tag that is not one is
refused with :class:`ProviderError` before any call. The node config is the body of
``instances.insert`` (``machineType``, ``disks``, ``networkInterfaces``,
``scheduling: {preemptible: true}`` for preemptible workers, ...); a short
``machineType`` (``n1-standard-2``) gets the zone's path, and an instance without
``networkInterfaces`` gets the default network with an external address. Each call that
changes something returns an operation, waited for (``zoneOperations.wait``) before
the method returns; errors of the operation become :class:`ProviderError`.

Credentials are Application Default Credentials (``google.auth.default``:
``$GOOGLE_APPLICATION_CREDENTIALS``, gcloud's, or the metadata server's).
``provider.endpoint_url`` replaces the API's base URL
(``https://compute.googleapis.com/compute/v1/``), and ``provider.api_endpoints``
(``{iam: URL, cloudresourcemanager: URL}``) those of the APIs the bootstrap calls, for
a test server or a mirror.

:meth:`GCPNodeProvider.bootstrap_config`
(:mod:`rayfield.autoscaler.providers.gcp_bootstrap`) tags the nodes and makes their
firewall rules, makes the cluster's SSH key (its public key in the instances'
metadata) and the head's service account, which the monitor on the head runs as.

Sources:
    Ray 0.7 ``autoscaler/gcp/node_provider.py`` (spec 5.2); the Compute Engine API
    (https://cloud.google.com/compute/docs/reference/rest/v1/instances).
"""

from __future__ import annotations

import copy
import re
import secrets
import time
from typing import Any

from rayfield.autoscaler.provider_base import (
    TAG_CLUSTER_NAME,
    TAG_NODE_KIND,
    NodeProvider,
    ProviderError,
)
from rayfield.autoscaler.providers.gcp_api import gcp_error, google_api

__all__ = ["GCPNodeProvider", "google_api"]

_LIVE = ("PROVISIONING", "STAGING", "RUNNING")
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# Seconds an operation (insert, delete, setLabels) may take.
OPERATION_TIMEOUT_S = 600.0


class GCPNodeProvider(NodeProvider):
    """Compute Engine instances as nodes (see the module docstring).

    Args:
        provider_config: ``type: gcp``, ``project_id``, ``availability_zone`` (one zone);
            optionally ``endpoint_url``.
        cluster_name: the value of every instance's ``rayfield-cluster-name`` label.

    Raises:
        ProviderError: the client library or credentials are missing, or
            ``project_id``/``availability_zone`` is not set.
    """

    #: Instances run nothing until NodeSetup sets them up over SSH.
    needs_setup = True

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        for key in ("project_id", "availability_zone"):
            if not provider_config.get(key):
                raise ProviderError(f"provider type 'gcp' needs provider.{key}")
        self.project = str(provider_config["project_id"])
        self.zone = str(provider_config["availability_zone"]).split(",")[0].strip()
        self.compute = google_api(provider_config)
        self._where = {"project": self.project, "zone": self.zone}

    def _run(self, what: str, request: Any) -> Any:
        try:
            return request.execute()
        except Exception as exc:  # googleapiclient.errors.HttpError, transport errors
            if getattr(getattr(exc, "resp", None), "status", None) == 404:
                return None
            raise ProviderError(f"Compute Engine refused to {what} ({gcp_error(exc)})") from None

    def _wait(self, what: str, op: dict[str, Any] | None, zone: bool = True) -> None:
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        ops = self.compute.zoneOperations() if zone else self.compute.globalOperations()
        where = self._where if zone else {"project": self.project}
        while op is not None and op.get("status") != "DONE":
            if time.monotonic() > deadline:
                raise ProviderError(f"{what}: operation {op.get('name')} not done in time")
            op = self._run(what, ops.wait(operation=op["name"], **where))
        errors = (op or {}).get("error", {}).get("errors", [])
        if errors:
            raise ProviderError(f"Compute Engine could not {what}: {errors[0].get('message')}")

    def _instance(self, node_id: str) -> dict[str, Any] | None:
        inst = self._run(
            "read an instance", self.compute.instances().get(instance=node_id, **self._where)
        )
        if inst is None or inst.get("labels", {}).get(TAG_CLUSTER_NAME) != self._label_value():
            return None
        return dict(inst)

    def _label_value(self) -> str:
        return self.cluster_name.lower().replace(".", "-")[:63]

    @staticmethod
    def _check_labels(tags: dict[str, str]) -> dict[str, str]:
        for k, v in tags.items():
            if not _LABEL_KEY.match(k) or not _LABEL.match(str(v)):
                raise ProviderError(
                    f"tag {k}={v!r} is not a Compute Engine label (lower-case letters, "
                    "digits, '-' and '_', at most 63): use such names and values"
                )
        return {k: str(v) for k, v in tags.items()}

    # ---- bootstrap ---------------------------------------------------------------------

    @classmethod
    def bootstrap_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        """A copy of the prepared ``config`` with the network tag, firewall rules, SSH
        key and the head's service account filled
        (:func:`rayfield.autoscaler.providers.gcp_bootstrap.bootstrap_gcp`).

        Raises:
            ProviderError: a Google API refused a call, or ssh-keygen failed.
        """
        from rayfield.autoscaler.providers.gcp_bootstrap import bootstrap_gcp

        cfg = copy.deepcopy(config)
        return bootstrap_gcp(cls(cfg["provider"], cfg["cluster_name"]), cfg)

    # ---- NodeProvider ------------------------------------------------------------------

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        query = f'labels.{TAG_CLUSTER_NAME} = "{self._label_value()}"'
        request = self.compute.instances().list(filter=query, **self._where)
        found: list[str] = []
        while request is not None:
            page = self._run("list instances", request) or {}
            for inst in page.get("items", []):
                labels = inst.get("labels", {})
                if inst.get("status") in _LIVE and all(
                    labels.get(k) == v for k, v in tag_filters.items()
                ):
                    found.append(inst["name"])
            request = self.compute.instances().list_next(request, page)
        return sorted(found)

    def is_running(self, node_id: str) -> bool:
        inst = self._instance(node_id)
        return inst is not None and inst.get("status") == "RUNNING"

    def is_terminated(self, node_id: str) -> bool:
        inst = self._instance(node_id)
        return inst is None or inst.get("status") not in _LIVE

    def node_tags(self, node_id: str) -> dict[str, str]:
        inst = self._instance(node_id)
        if inst is None:
            raise ProviderError(f"cluster {self.cluster_name!r} has no instance {node_id!r}")
        return {k: v for k, v in inst.get("labels", {}).items() if k != TAG_CLUSTER_NAME}

    def _interface(self, node_id: str) -> dict[str, Any]:
        inst = self._instance(node_id) or {}
        return dict((inst.get("networkInterfaces") or [{}])[0])

    def external_ip(self, node_id: str) -> str | None:
        configs = self._interface(node_id).get("accessConfigs") or [{}]
        return configs[0].get("natIP")

    def internal_ip(self, node_id: str) -> str | None:
        return self._interface(node_id).get("networkIP")

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        new = self._check_labels(tags)
        inst = self._instance(node_id)
        if inst is None:
            raise ProviderError(f"cluster {self.cluster_name!r} has no instance {node_id!r}")
        body = {
            "labels": {**inst.get("labels", {}), **new},
            "labelFingerprint": inst.get("labelFingerprint"),
        }
        request = self.compute.instances().setLabels(instance=node_id, body=body, **self._where)
        self._wait(f"label {node_id}", self._run(f"label {node_id}", request))

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        labels = {**self._check_labels(tags), TAG_CLUSTER_NAME: self._label_value()}
        body = copy.deepcopy({k: v for k, v in node_config.items() if k != "resources"})
        machine = str(body.get("machineType", "n1-standard-2"))
        if "/" not in machine:
            body["machineType"] = f"zones/{self.zone}/machineTypes/{machine}"
        body.setdefault(
            "networkInterfaces",
            [
                {
                    "network": "global/networks/default",
                    "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
                }
            ],
        )
        body["labels"] = {**body.get("labels", {}), **labels}
        kind = re.sub(r"[^a-z0-9-]", "-", tags.get(TAG_NODE_KIND, "node").lower())
        prefix = re.sub(r"[^a-z0-9-]", "-", f"rayfield-{self.cluster_name}".lower())[:44]
        for _ in range(count):
            body["name"] = f"{prefix}-{kind}-{secrets.token_hex(4)}"[:63]
            request = self.compute.instances().insert(body=body, **self._where)
            self._wait(f"create {body['name']}", self._run(f"create {body['name']}", request))

    def terminate_node(self, node_id: str) -> None:
        if self._instance(node_id) is None:
            return
        request = self.compute.instances().delete(instance=node_id, **self._where)
        self._wait(f"delete {node_id}", self._run(f"delete {node_id}", request))

    def cleanup(self) -> None:
        self.compute.close()
