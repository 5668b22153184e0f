"""The ``kubernetes`` provider with the real ``kubernetes`` client against a fake API
server over HTTP (``fake_kubernetes.py``), reached through a kubeconfig file as
``kubectl`` would. Not run against a real cluster here."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the [kubernetes] extra is not installed")

from fake_http import FakeAPIServer
from fake_kubernetes import TOKEN, FakeKubernetes, write_kubeconfig

from rayfield.autoscaler.autoscaler import node_config, node_tags
from rayfield.autoscaler.config import prepare_config
from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    KIND_WORKER,
    TAG_CLUSTER_NAME,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    NodeProvider,
    ProviderError,
    get_node_provider,
)
from rayfield.autoscaler.provider_conformance import NodeProviderConformance
from rayfield.autoscaler.providers import kubernetes_bootstrap
from rayfield.autoscaler.providers.kubernetes import KubernetesNodeProvider

_names = itertools.count()
FAKE = FakeKubernetes()


@pytest.fixture(scope="module", autouse=True)
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeAPIServer]:
    """The fake API server, and $KUBECONFIG naming it (with a bearer token)."""
    with FakeAPIServer(FAKE.handle) as server, pytest.MonkeyPatch.context() as mp:
        kubeconfig = write_kubeconfig(tmp_path_factory.mktemp("kube"), server.url, TOKEN)
        mp.setenv("KUBECONFIG", str(kubeconfig))
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        mp.setattr(KubernetesNodeProvider, "running_poll_s", 0.05)
        yield server


def provider(namespace: str = "rf") -> KubernetesNodeProvider:
    p = get_node_provider({"type": "kubernetes", "namespace": namespace}, f"k{next(_names)}")
    assert isinstance(p, KubernetesNodeProvider)
    return p


POD = {
    "spec": {
        "containers": [
            {"name": "rayfield", "image": "python:3.11-slim", "command": ["sleep", "infinity"]}
        ]
    },
    "resources": {"CPU": 1},
}


class TestKubernetesConformance(NodeProviderConformance):
    node_config = POD

    def make_provider(self) -> NodeProvider:
        return provider()


def test_pods_carry_the_manifest_and_labels(kube_api: FakeAPIServer) -> None:
    p = provider()
    p.create_node(POD, {TAG_NODE_KIND: KIND_HEAD, TAG_NODE_STATUS: "up-to-date"}, 1)
    (head,) = p.non_terminated_nodes({})
    pod = FAKE.pods[("rf", head)]
    assert head.startswith(f"rayfield-{p.cluster_name}-head-")
    assert pod["metadata"]["labels"] == {
        TAG_NODE_KIND: KIND_HEAD,
        TAG_NODE_STATUS: "up-to-date",
        TAG_CLUSTER_NAME: p.cluster_name,
    }
    assert pod["spec"]["containers"][0]["image"] == "python:3.11-slim"
    assert "resources" not in pod  # the node type's resources are rayfield's, not the pod's
    assert p.internal_ip(head) == pod["status"]["podIP"]
    # the label patch went out as a JSON patch the API server takes
    p.set_node_tags(head, {TAG_NODE_STATUS: "setting-up"})
    assert FAKE.pods[("rf", head)]["metadata"]["labels"][TAG_NODE_STATUS] == "setting-up"
    assert ("PATCH", f"/api/v1/namespaces/rf/pods/{head}") in kube_api.requests
    # another namespace, another cluster: not seen
    assert provider("other").non_terminated_nodes({}) == []
    p.terminate_node(head)
    assert ("rf", head) not in FAKE.pods


def test_a_tag_the_api_server_refuses_is_a_provider_error() -> None:
    p = provider()
    with pytest.raises(ProviderError, match="HTTP 422"):
        p.create_node(POD, {TAG_NODE_KIND: "head", "note": "has spaces"}, 1)


def test_no_cluster_configured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ProviderError, match="KUBECONFIG"):
        provider()


def test_bootstrap_lets_the_head_manage_pods_and_names_it_with_a_service(
    kube_api: FakeAPIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.client.exceptions import ApiException

    name = f"k{next(_names)}"
    manifest = {"spec": POD["spec"]}
    cfg = prepare_config(
        {
            "cluster_name": name,
            "provider": {"type": "kubernetes", "namespace": "rf"},
            "max_workers": 1,
            "head_node": manifest,
            "worker_nodes": manifest,
        }
    )
    out = KubernetesNodeProvider.bootstrap_config(cfg)
    account = kubernetes_bootstrap.account_name(name)
    service = kubernetes_bootstrap.head_service_name(name)
    types = out["available_node_types"]
    assert types[out["head_node_type"]]["node_config"]["spec"]["serviceAccountName"] == account
    assert "serviceAccountName" not in types["worker"]["node_config"]["spec"]
    assert ("serviceaccounts", "rf", account) in FAKE.objects
    assert FAKE.objects[("roles", "rf", account)]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": list(kubernetes_bootstrap.POD_VERBS)},
        {
            "apiGroups": [""],
            "resources": ["pods/exec"],
            "verbs": list(kubernetes_bootstrap.EXEC_VERBS),
        },
    ]
    binding = FAKE.objects[("rolebindings", "rf", account)]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "rf"}]
    spec = FAKE.objects[("services", "rf", service)]["spec"]
    assert spec["clusterIP"] == "None" and spec["ports"][0]["port"] == 6379
    # Again (a second `up`): nothing new is made.
    posts = [r for r in kube_api.requests if r[0] == "POST"]
    assert KubernetesNodeProvider.bootstrap_config(cfg) == out
    assert [r for r in kube_api.requests if r[0] == "POST"] == posts

    # The head pod runs as the account; the Service selects it (and only it).
    p = get_node_provider(out["provider"], name)
    head_type = out["head_node_type"]
    p.create_node(node_config(out, head_type), node_tags(out, head_type, True), 1)
    (head,) = p.non_terminated_nodes({})
    assert FAKE.pods[("rf", head)]["spec"]["serviceAccountName"] == account

    # The monitor on the head, with the account's token (what Kubernetes mounts in the
    # head pod): it creates, lists, labels and deletes worker pods, and nothing else.
    kubeconfig = write_kubeconfig(tmp_path, kube_api.url, FAKE.token_for("rf", account))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    as_head = get_node_provider(out["provider"], name)
    assert isinstance(as_head, KubernetesNodeProvider)
    as_head.create_node(node_config(out, "worker"), node_tags(out, "worker", False), 1)
    (worker,) = as_head.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})
    as_head.set_node_tags(worker, {TAG_NODE_STATUS: "setting-up"})
    assert FAKE.endpoints("rf", service) == [head]
    as_head.terminate_node(worker)
    assert as_head.non_terminated_nodes({}) == [head]
    with pytest.raises(ApiException) as denied:
        as_head.core.create_namespaced_service("rf", {"metadata": {"name": "mine"}})
    assert denied.value.status == 403
    elsewhere = get_node_provider({**out["provider"], "namespace": "other"}, name)
    with pytest.raises(ProviderError, match="HTTP 403"):
        elsewhere.non_terminated_nodes({})
    p.terminate_node(head)
