"""The cloud examples validate against the cluster schema, each provider's required
keys are enforced, and ``type: external`` loads a provider class by dotted path (which
then passes the conformance suite)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from memory_provider import MemoryProvider

from rayfield.autoscaler.config import ConfigError, load_config, prepare_config
from rayfield.autoscaler.node_provider import NodeProvider, ProviderError, get_node_provider
from rayfield.autoscaler.provider_conformance import NodeProviderConformance

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class ExternalMemoryProvider(MemoryProvider):
    """The loop tests' in-memory provider with the constructor an external one has."""

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__()
        self.provider_config, self.cluster_name = provider_config, cluster_name


EXTERNAL = {"type": "external", "module": f"{__name__}.ExternalMemoryProvider"}


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml", "kubernetes.yaml"])
def test_cloud_examples_are_valid(name: str) -> None:
    cfg = load_config(EXAMPLES / name)
    assert cfg["provider"]["type"] == name.removesuffix(".yaml")
    assert set(cfg["available_node_types"]) == {"head", "worker"}
    assert prepare_config(cfg) == cfg  # the normal form is stable


def test_aws_example_has_spot_workers_and_the_cache() -> None:
    cfg = load_config(EXAMPLES / "aws.yaml")
    worker = cfg["available_node_types"]["worker"]["node_config"]
    assert worker["InstanceMarketOptions"]["MarketType"] == "spot"
    assert cfg["provider"]["cache_stopped_nodes"] is True


def test_kubernetes_example_is_set_up_over_exec_with_the_token_from_the_secret() -> None:
    from rayfield.autoscaler.providers.kubernetes_bootstrap import token_secret_name, with_token_env

    cfg = load_config(EXAMPLES / "kubernetes.yaml")
    assert cfg["provider"]["command_runner"] == "api"
    worker = cfg["available_node_types"]["worker"]["node_config"]
    assert worker["spec"]["containers"][0]["command"] == ["sleep", "infinity"]
    assert cfg["worker_start_ray_commands"]  # the defaults, run over exec
    assert any("rayfield-autoscaler[kubernetes]" in c for c in cfg["setup_commands"])
    (container,) = with_token_env(worker, token_secret_name("k8s-demo"))["spec"]["containers"]
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "rayfield-k8s-demo-token"


@pytest.mark.parametrize(
    ("provider", "missing"),
    [
        ({"type": "aws"}, "provider.region"),
        ({"type": "gcp", "project_id": "p", "region": "r"}, "provider.availability_zone"),
        ({"type": "external"}, "provider.module"),
    ],
)
def test_each_provider_type_needs_its_keys(provider: dict[str, str], missing: str) -> None:
    with pytest.raises(ConfigError, match=missing.replace(".", r"\.")):
        prepare_config({"cluster_name": "c", "provider": provider, "max_workers": 1})


def test_provider_defaults_are_filled() -> None:
    cfg = prepare_config(
        {"cluster_name": "c", "provider": {"type": "kubernetes"}, "max_workers": 1}
    )
    assert cfg["provider"]["namespace"] == "default"
    aws = prepare_config(
        {"cluster_name": "c", "provider": {"type": "aws", "region": "eu-west-1"}, "max_workers": 1}
    )
    assert aws["provider"]["cache_stopped_nodes"] is True


def test_external_provider_by_dotted_path(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"cluster_name": "c", "provider": EXTERNAL, "max_workers": 1}))
    cfg = load_config(path)
    p = get_node_provider(cfg["provider"], cfg["cluster_name"])
    assert isinstance(p, ExternalMemoryProvider) and p.cluster_name == "c"
    assert type(p).bootstrap_config(cfg) is cfg  # the default bootstrap changes nothing


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("NoDots", "not a dotted path"),
        ("no_such_package_rf.Provider", "cannot import 'no_such_package_rf'"),
        (f"{__name__}.Missing", "has no 'Missing'"),
        ("pathlib.Path", "not a subclass of rayfield.autoscaler.node_provider.NodeProvider"),
    ],
)
def test_external_provider_errors(module: str, message: str) -> None:
    with pytest.raises(ProviderError, match=message.replace(".", r"\.")):
        get_node_provider({"type": "external", "module": module}, "c")


def test_unknown_provider_type_lists_the_known_ones() -> None:
    with pytest.raises(ProviderError, match=r"'aws'.*'external'"):
        get_node_provider({"type": "azure"}, "c")


class TestExternalConformance(NodeProviderConformance):
    """A third party's run of the suite: their provider loaded as ``type: external``."""

    def make_provider(self) -> NodeProvider:
        return get_node_provider(EXTERNAL, "conformance")
