"""The ``gcp`` provider with the real ``google-api-python-client`` (and google-auth's
service-account flow) against a fake Compute Engine API and token endpoint over HTTP
(``fake_gcp.py``). Not run against Google Cloud here."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

pytest.importorskip("googleapiclient", reason="the [gcp] extra is not installed")

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fake_gcp import FakeCompute
from fake_http import FakeAPIServer

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
from rayfield.autoscaler.providers.gcp import GCPNodeProvider

PROJECT, ZONE = "rf-test", "us-west1-a"
FAKE = FakeCompute()
URL = ""
_names = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def gcp_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeAPIServer]:
    """The fake API, and a service-account key whose token_uri is the fake's."""
    global URL
    with FakeAPIServer(FAKE.handle) as server, pytest.MonkeyPatch.context() as mp:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        account = tmp_path_factory.mktemp("gcp") / "sa.json"
        account.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": PROJECT,
                    "private_key_id": "k1",
                    "private_key": pem,
                    "client_email": f"rf@{PROJECT}.iam.gserviceaccount.com",
                    "client_id": "1",
                    "token_uri": f"{server.url}/token",
                }
            )
        )
        mp.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(account))
        URL = f"{server.url}/compute/v1/"
        yield server


def provider_config() -> dict[str, str]:
    return {
        "type": "gcp",
        "project_id": PROJECT,
        "region": "us-west1",
        "availability_zone": ZONE,
        "endpoint_url": URL,
    }


def provider() -> NodeProvider:
    return get_node_provider(provider_config(), f"g{next(_names)}")


class TestGCPConformance(NodeProviderConformance):
    node_config = {"machineType": "n1-standard-2", "resources": {"CPU": 2}}

    def make_provider(self) -> NodeProvider:
        return provider()


def test_instances_carry_the_body_and_labels(gcp_api: FakeAPIServer) -> None:
    p = provider()
    assert isinstance(p, GCPNodeProvider)
    worker = {
        "machineType": "n1-standard-2",
        "scheduling": {"preemptible": True},
        "disks": [
            {
                "boot": True,
                "initializeParams": {
                    "sourceImage": "projects/debian-cloud/global/images/family/debian-12"
                },
            }
        ],
    }
    p.create_node(worker, {TAG_NODE_KIND: KIND_WORKER, TAG_NODE_STATUS: "uninitialized"}, 2)
    nodes = p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})
    assert len(nodes) == 2
    inst = FAKE.instances[(PROJECT, ZONE, nodes[0])]
    assert inst["scheduling"] == {"preemptible": True}
    assert inst["machineType"] == f"zones/{ZONE}/machineTypes/n1-standard-2"
    assert inst["labels"][TAG_CLUSTER_NAME] == p.cluster_name
    assert p.node_tags(nodes[0]) == {TAG_NODE_KIND: KIND_WORKER, TAG_NODE_STATUS: "uninitialized"}
    assert p.internal_ip(nodes[0]) == inst["networkInterfaces"][0]["networkIP"]
    assert p.external_ip(nodes[0]) == inst["networkInterfaces"][0]["accessConfigs"][0]["natIP"]
    p.set_node_tags(nodes[0], {TAG_NODE_STATUS: "up-to-date"})  # fingerprint checked
    assert p.node_tags(nodes[0])[TAG_NODE_STATUS] == "up-to-date"
    assert FAKE.tokens_issued >= 1  # google-auth's JWT grant went to the token endpoint
    paths = {path for _, path in gcp_api.requests}
    assert f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{nodes[0]}/setLabels" in paths
    p.terminate_nodes(nodes)
    assert p.non_terminated_nodes({}) == []


def test_tags_compute_engine_refuses_are_provider_errors() -> None:
    p = provider()
    with pytest.raises(ProviderError, match="not a Compute Engine label"):
        p.create_node({}, {TAG_NODE_KIND: KIND_HEAD, "Note": "Upper"}, 1)
    with pytest.raises(ProviderError, match="HTTP 400"):
        p.create_node(
            {"machineType": "zones/elsewhere/machineTypes/x"}, {TAG_NODE_KIND: KIND_HEAD}, 1
        )


def test_missing_settings() -> None:
    with pytest.raises(ProviderError, match="project_id"):
        GCPNodeProvider({"type": "gcp", "availability_zone": ZONE}, "x")


def test_bootstrap_tags_the_nodes_and_makes_the_firewall_rules() -> None:
    from rayfield.autoscaler.config import prepare_config

    name = f"g{next(_names)}"
    cfg = prepare_config(
        {
            "cluster_name": name,
            "provider": {**provider_config(), "ssh_source_cidr": "203.0.113.0/24"},
            "auth": {"ssh_user": "ubuntu", "ssh_private_key": "~/.ssh/id"},
            "max_workers": 1,
            "head_node": {"machineType": "n1-standard-2"},
            "worker_nodes": {"machineType": "n1-standard-2"},
        }
    )
    out = GCPNodeProvider.bootstrap_config(cfg)
    tag = f"rayfield-{name}"
    for t in out["available_node_types"].values():
        assert t["node_config"]["tags"] == {"items": [tag]}
    internal = FAKE.firewalls[(PROJECT, f"{tag}-internal")]
    ssh = FAKE.firewalls[(PROJECT, f"{tag}-ssh")]
    assert internal["sourceTags"] == [tag] and internal["targetTags"] == [tag]
    assert "sourceRanges" not in internal  # nothing from outside the cluster
    assert ssh["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    assert ssh["sourceRanges"] == ["203.0.113.0/24"]
    assert GCPNodeProvider.bootstrap_config(cfg) == out  # again: the rules exist, no change
    p = GCPNodeProvider(out["provider"], name)
    worker_conf = out["available_node_types"]["worker"]["node_config"]
    p.create_node(worker_conf, {TAG_NODE_KIND: KIND_WORKER}, 1)
    (worker,) = p.non_terminated_nodes({})
    assert FAKE.instances[(PROJECT, ZONE, worker)]["tags"] == {"items": [tag]}
    p.terminate_node(worker)
