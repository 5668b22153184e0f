"""The ``gcp`` provider with the real ``google-api-python-client`` (and google-auth's
service-account flow) against a fake Compute Engine API and token endpoint over HTTP
(``fake_gcp.py``). Not run against Google Cloud here."""

from __future__ import annotations

import itertools
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
SERVER = ""
_names = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def gcp_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeAPIServer]:
    """The fake API, and a service-account key whose token_uri is the fake's."""
    global URL, SERVER
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
        SERVER = server.url
        yield server


def provider_config() -> dict[str, Any]:
    return {
        "type": "gcp",
        "project_id": PROJECT,
        "region": "us-west1",
        "availability_zone": ZONE,
        "endpoint_url": URL,
        "api_endpoints": {"iam": f"{SERVER}/iam/", "cloudresourcemanager": f"{SERVER}/crm/"},
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


def test_bootstrap_makes_the_heads_service_account_and_the_clusters_ssh_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key given: a new one (0600) whose public key is in every instance's metadata;
    the head runs as the autoscaler's service account, granted the roles it needs
    (the grant retried while IAM does not see the new account yet)."""
    from rayfield.autoscaler.config import prepare_config
    from rayfield.autoscaler.providers import gcp_bootstrap

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(gcp_bootstrap, "IAM_RETRY_S", 0.01)
    # a project where no cluster was bootstrapped yet
    FAKE.service_accounts.clear()
    FAKE.policies[PROJECT] = {
        "version": 1,
        "etag": "e-other",
        "bindings": [{"role": "roles/viewer", "members": ["user:bob@example.com"]}],
    }
    FAKE.iam_lag = 1
    name = f"g{next(_names)}"
    user_key = {"key": "ssh-keys", "value": "alice:ssh-ed25519 AAAAalice alice"}
    cfg = prepare_config(
        {
            "cluster_name": name,
            "provider": provider_config(),
            "auth": {"ssh_user": "ubuntu"},
            "max_workers": 1,
            "head_node": {"machineType": "n1-standard-2"},
            "worker_nodes": {"machineType": "n1-standard-2", "metadata": {"items": [user_key]}},
        }
    )
    writes = FAKE.policy_writes
    out = GCPNodeProvider.bootstrap_config(cfg)
    assert FAKE.iam_lag == 0  # refused once, then granted

    key = tmp_path / ".ssh" / f"rayfield-{name}-gcp-{PROJECT}.pem"
    assert out["auth"] == {"ssh_user": "ubuntu", "ssh_private_key": str(key)}
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = (tmp_path / ".ssh" / f"{key.name}.pub").read_text().split()[:2]
    line = f"ubuntu:{' '.join(public)} ubuntu"
    types = out["available_node_types"]
    assert types["head"]["node_config"]["metadata"] == {
        "items": [{"key": "ssh-keys", "value": line}]
    }
    worker_items = types["worker"]["node_config"]["metadata"]["items"]
    assert worker_items == [{"key": "ssh-keys", "value": f"{user_key['value']}\n{line}"}]
    assert key.read_text().splitlines()[1] not in json.dumps(out)  # no private key part

    email = gcp_bootstrap.service_account_email(PROJECT)
    assert email in FAKE.service_accounts
    assert types["head"]["node_config"]["serviceAccounts"] == [
        {"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    ]
    assert "serviceAccounts" not in types["worker"]["node_config"]
    member = f"serviceAccount:{email}"
    granted = {b["role"] for b in FAKE.policies[PROJECT]["bindings"] if member in b["members"]}
    assert granted == set(gcp_bootstrap.HEAD_ROLES)
    assert FAKE.policies[PROJECT]["bindings"][0] == {  # the others' bindings kept
        "role": "roles/viewer",
        "members": ["user:bob@example.com"],
    }
    assert FAKE.policy_writes == writes + 1

    # Again (a second `up`): the same key, no second metadata line, no policy write.
    before = key.read_text()
    assert GCPNodeProvider.bootstrap_config(cfg) == out
    assert key.read_text() == before and FAKE.policy_writes == writes + 1

    # The head is created with its service account and the key in its metadata.
    p = GCPNodeProvider(out["provider"], name)
    p.create_node(types["head"]["node_config"], {TAG_NODE_KIND: KIND_HEAD}, 1)
    (head,) = p.non_terminated_nodes({})
    inst = FAKE.instances[(PROJECT, ZONE, head)]
    assert inst["serviceAccounts"][0]["email"] == email
    assert inst["metadata"]["items"][0]["value"] == line
    p.terminate_node(head)


def test_a_head_service_account_of_the_users_is_kept() -> None:
    from rayfield.autoscaler.config import prepare_config

    mine = [{"email": f"mine@{PROJECT}.iam.gserviceaccount.com", "scopes": []}]
    cfg = prepare_config(
        {
            "cluster_name": f"g{next(_names)}",
            "provider": provider_config(),
            "auth": {"ssh_user": "ubuntu", "ssh_private_key": "~/.ssh/id"},
            "max_workers": 1,
            "head_node": {"machineType": "n1-standard-2", "serviceAccounts": mine},
            "worker_nodes": {"machineType": "n1-standard-2"},
        }
    )
    out = GCPNodeProvider.bootstrap_config(cfg)
    assert out["available_node_types"]["head"]["node_config"]["serviceAccounts"] == mine
    assert "metadata" not in out["available_node_types"]["head"]["node_config"]  # key given
