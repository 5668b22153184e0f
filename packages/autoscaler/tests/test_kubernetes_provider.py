"""The ``kubernetes`` provider with the real ``kubernetes`` client against a fake API
server over HTTP (``fake_kubernetes.py``), reached through a kubeconfig file as
``kubectl`` would. Not run against a real cluster here."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes", reason="the [kubernetes] extra is not installed")

from fake_http import FakeAPIServer
from fake_kubernetes import TOKEN, FakeKubernetes

from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    TAG_CLUSTER_NAME,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    NodeProvider,
    ProviderError,
    get_node_provider,
)
from rayfield.autoscaler.provider_conformance import NodeProviderConformance
from rayfield.autoscaler.providers.kubernetes import KubernetesNodeProvider

_names = itertools.count()
FAKE = FakeKubernetes()


@pytest.fixture(scope="module", autouse=True)
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeAPIServer]:
    """The fake API server, and $KUBECONFIG naming it (with a bearer token)."""
    with FakeAPIServer(FAKE.handle) as server, pytest.MonkeyPatch.context() as mp:
        kubeconfig = tmp_path_factory.mktemp("kube") / "config"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
                    "users": [{"name": "me", "user": {"token": TOKEN}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                    "current-context": "fake",
                }
            )
        )
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
