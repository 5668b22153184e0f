"""The ``aws`` provider and its bootstrap against moto in server mode: a
``ThreadedMotoServer`` on 127.0.0.1 (an ephemeral port), reached by boto3 over real HTTP
through ``provider.endpoint_url``. One server for the module; each test uses a cluster
name of its own."""

from __future__ import annotations

import itertools
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("boto3", reason="the [aws] extra is not installed")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")

import boto3  # noqa: E402

from rayfield.autoscaler.config import load_config, prepare_config  # noqa: E402
from rayfield.autoscaler.node_provider import (  # noqa: E402
    KIND_HEAD,
    KIND_WORKER,
    STATUS_UPDATE_FAILED,
    TAG_CLUSTER_NAME,
    TAG_LAUNCH_CONFIG,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    TAG_NODE_TYPE,
    NodeProvider,
    ProviderError,
    get_node_provider,
)
from rayfield.autoscaler.provider_conformance import NodeProviderConformance  # noqa: E402
from rayfield.autoscaler.providers.aws import AWSNodeProvider  # noqa: E402
from rayfield.autoscaler.providers.aws_bootstrap import (  # noqa: E402
    IAM_PROFILE_NAME,
    bootstrap_aws,
    security_group_name,
)

REGION = "us-west-2"
AMI = "ami-0123456789abcdef0"  # moto launches any id; listing its real images takes seconds
_names = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def moto_url() -> Iterator[str]:
    """A moto server for the module, with fake credentials in the environment."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    env = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MOTO_EC2_LOAD_DEFAULT_AMIS")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing-secret")
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"  # loading ~1,300 AMIs takes seconds
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    AWSNodeProvider.running_poll_s = 0.1  # moto's instances run at the next look
    host, port = server.get_host_and_port()
    global URL
    URL = f"http://{host}:{port}"
    yield URL
    server.stop()
    AWSNodeProvider.running_poll_s = 2.0
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


URL = ""


def ec2() -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=URL)


def provider_config(**extra: Any) -> dict[str, Any]:
    return {"type": "aws", "region": REGION, "endpoint_url": URL, **extra}


def cluster_name() -> str:
    return f"c{next(_names)}-{os.getpid()}"


def instance(node_id: str) -> dict[str, Any]:
    out = ec2().describe_instances(InstanceIds=[node_id])
    return out["Reservations"][0]["Instances"][0]


def config(name: str, **provider: Any) -> dict[str, Any]:
    """A prepared aws config: an on-demand head, spot workers."""
    return prepare_config(
        {
            "cluster_name": name,
            "provider": provider_config(**provider),
            "auth": {"ssh_user": "ubuntu"},
            "max_workers": 2,
            "head_node": {"InstanceType": "m5.large", "ImageId": AMI},
            "worker_nodes": {
                "InstanceType": "m5.large",
                "ImageId": AMI,
                "InstanceMarketOptions": {"MarketType": "spot"},
            },
        }
    )


class TestAWSConformance(NodeProviderConformance):
    """The conformance suite, with stopped nodes cached (the default)."""

    node_config = {"ImageId": AMI, "InstanceType": "t3.micro", "resources": {"CPU": 1}}
    cache = True

    def make_provider(self) -> NodeProvider:
        cfg = provider_config(cache_stopped_nodes=self.cache)
        return get_node_provider(cfg, cluster_name())


class TestAWSConformanceTerminating(TestAWSConformance):
    """The conformance suite, with nodes terminated instead of stopped."""

    cache = False


def test_tags_on_the_instance_and_what_node_tags_shows() -> None:
    name = cluster_name()
    p = AWSNodeProvider(provider_config(), name)
    tags = {TAG_NODE_KIND: KIND_HEAD, TAG_NODE_STATUS: "uninitialized", TAG_LAUNCH_CONFIG: "abc"}
    p.create_node({"ImageId": AMI, "InstanceType": "t3.micro"}, tags, 1)
    (head,) = p.non_terminated_nodes({})
    on_ec2 = {t["Key"]: t["Value"] for t in instance(head)["Tags"]}
    assert on_ec2 == {**tags, TAG_CLUSTER_NAME: name, "Name": f"rayfield-{name}-head"}
    assert p.node_tags(head) == tags
    p.set_node_tags(head, {TAG_NODE_STATUS: "up-to-date"})
    assert p.node_tags(head)[TAG_NODE_STATUS] == "up-to-date"
    assert p.internal_ip(head) == instance(head)["PrivateIpAddress"]
    assert p.external_ip(head) == instance(head).get("PublicIpAddress")
    # another cluster's provider does not see it
    assert AWSNodeProvider(provider_config(), cluster_name()).non_terminated_nodes({}) == []
    p.terminate_node(head)


def test_bootstrap_key_pair_security_group_iam_and_subnets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    name = cluster_name()
    caplog.set_level(logging.DEBUG, logger="rayfield.autoscaler")
    cfg = bootstrap_aws(config(name, availability_zone="us-west-2a,us-west-2b"))

    # key pair: created in EC2, private key 0600 under ~/.ssh (0700)
    key = Path(cfg["auth"]["ssh_private_key"])
    assert key == tmp_path / ".ssh" / f"rayfield-{name}-{REGION}.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    material = key.read_text()
    assert "PRIVATE KEY" in material
    types = cfg["available_node_types"]
    assert {t["node_config"]["KeyName"] for t in types.values()} == {key.stem}
    assert ec2().describe_key_pairs(KeyNames=[key.stem])["KeyPairs"]

    # security group: everything from the group itself, only SSH from outside
    (group_id,) = {tuple(t["node_config"]["SecurityGroupIds"]) for t in types.values()}
    (group,) = ec2().describe_security_groups(GroupIds=list(group_id))["SecurityGroups"]
    assert group["GroupName"] == security_group_name(name)
    outside = [p for p in group["IpPermissions"] if p.get("IpRanges")]
    assert [(p["IpProtocol"], p["FromPort"], p["ToPort"]) for p in outside] == [("tcp", 22, 22)]
    inside = [p for p in group["IpPermissions"] if p.get("UserIdGroupPairs")]
    assert [(p["IpProtocol"], [g["GroupId"] for g in p["UserIdGroupPairs"]]) for p in inside] == [
        ("-1", [group["GroupId"]])
    ]

    # IAM: the head gets the instance profile (with its role), workers do not
    head_conf = types[cfg["head_node_type"]]["node_config"]
    iam = boto3.client("iam", region_name=REGION, endpoint_url=URL)
    profile = iam.get_instance_profile(InstanceProfileName=IAM_PROFILE_NAME)["InstanceProfile"]
    assert head_conf["IamInstanceProfile"] == {"Arn": profile["Arn"]}
    assert [r["RoleName"] for r in profile["Roles"]] == [IAM_PROFILE_NAME]
    assert "IamInstanceProfile" not in types["worker"]["node_config"]

    # subnets: the default VPC's in the two zones, used in turn
    subnets = ec2().describe_subnets(SubnetIds=head_conf["SubnetIds"])["Subnets"]
    assert sorted(s["AvailabilityZone"] for s in subnets) == ["us-west-2a", "us-west-2b"]
    p = AWSNodeProvider(cfg["provider"], name)
    for _ in range(2):
        p.create_node(types["worker"]["node_config"], {TAG_NODE_KIND: KIND_WORKER}, 1)
    used = {instance(n)["SubnetId"] for n in p.non_terminated_nodes({})}
    assert used == set(head_conf["SubnetIds"])

    p.create_node(head_conf, {TAG_NODE_KIND: KIND_HEAD}, 1)
    (head,) = p.non_terminated_nodes({TAG_NODE_KIND: KIND_HEAD})
    assert instance(head)["IamInstanceProfile"]["Arn"] == profile["Arn"]
    assert instance(head)["KeyName"] == key.stem

    # bootstrapping again reuses all of it and adds no rule
    again = bootstrap_aws(config(name, availability_zone="us-west-2a,us-west-2b"))
    assert again["auth"]["ssh_private_key"] == str(key) and key.read_text() == material
    (group2,) = ec2().describe_security_groups(GroupIds=list(group_id))["SecurityGroups"]
    assert len(group2["IpPermissions"]) == len(group["IpPermissions"])

    # a key pair whose private key is lost here is not reused: the next name is taken
    key.unlink()
    third = bootstrap_aws(config(name))
    assert Path(third["auth"]["ssh_private_key"]).name == f"rayfield-{name}-{REGION}_1.pem"

    # no secret in the log or in any tag
    every_tag = ec2().describe_tags()["Tags"]
    secrets = [material.strip().splitlines()[1], "testing-secret"]
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("rayfield.")]
    assert any("created key pair" in m for m in ours)
    for text in ours + [str(t) for t in every_tag]:
        assert not any(s in text for s in secrets), text
    p.terminate_nodes(p.non_terminated_nodes({}))


def test_a_given_key_needs_key_names(tmp_path: Path) -> None:
    cfg = config(cluster_name())
    cfg["auth"]["ssh_private_key"] = str(tmp_path / "mine.pem")
    with pytest.raises(ProviderError, match=r"node_config\.KeyName"):
        bootstrap_aws(cfg)


def test_spot_workers_are_spot_and_terminated_not_stopped() -> None:
    name = cluster_name()
    cfg = config(name)
    p = AWSNodeProvider(cfg["provider"], name)
    worker_conf = cfg["available_node_types"]["worker"]["node_config"]
    p.create_node(worker_conf, {TAG_NODE_KIND: KIND_WORKER}, 2)
    workers = p.non_terminated_nodes({})
    assert len(workers) == 2
    assert {instance(w).get("InstanceLifecycle") for w in workers} == {"spot"}
    p.terminate_nodes(workers)  # cache_stopped_nodes is on, but spot cannot stop
    assert {instance(w)["State"]["Name"] for w in workers} <= {"shutting-down", "terminated"}


def test_cache_stopped_nodes_stops_and_reuses() -> None:
    name = cluster_name()
    p = AWSNodeProvider(provider_config(), name)
    conf = {"ImageId": AMI, "InstanceType": "t3.micro"}
    tags = {TAG_NODE_KIND: KIND_WORKER, TAG_NODE_TYPE: "cpu", TAG_LAUNCH_CONFIG: "h1"}
    p.create_node(conf, {**tags, TAG_NODE_STATUS: "up-to-date"}, 1)
    (first,) = p.non_terminated_nodes({})
    p.terminate_node(first)
    assert instance(first)["State"]["Name"] in ("stopping", "stopped")
    assert p.non_terminated_nodes({}) == [] and p.is_terminated(first)

    p.create_node(conf, {**tags, TAG_NODE_STATUS: "uninitialized"}, 2)  # one reused, one new
    nodes = p.non_terminated_nodes({})
    assert first in nodes and len(nodes) == 2
    assert p.is_running(first)
    assert p.node_tags(first)[TAG_NODE_STATUS] == "uninitialized"  # retagged

    p.terminate_nodes(nodes)
    p.create_node(conf, {**tags, TAG_LAUNCH_CONFIG: "h2"}, 1)  # another launch config
    (fresh,) = p.non_terminated_nodes({})
    assert fresh not in nodes
    p.terminate_node(fresh)


def test_errors_say_what_failed() -> None:
    with pytest.raises(ProviderError, match=r"provider\.region"):
        AWSNodeProvider({"type": "aws"}, "x")
    p = AWSNodeProvider(provider_config(cache_stopped_nodes=False), cluster_name())
    with pytest.raises(ProviderError, match="InvalidSubnetID"):
        p.create_node({"ImageId": AMI, "SubnetIds": ["subnet-nope"]}, {TAG_NODE_KIND: "worker"}, 1)


def test_the_example_config_bootstraps_and_launches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    name = cluster_name()
    example = Path(__file__).resolve().parents[2] / "examples" / "aws.yaml"
    cfg = load_config(example, {"cluster_name": name})
    cfg["provider"]["endpoint_url"] = URL
    cfg = AWSNodeProvider.bootstrap_config(cfg)
    p = get_node_provider(cfg["provider"], name)
    for node_type in ("head", "worker"):
        conf = cfg["available_node_types"][node_type]["node_config"]
        p.create_node(conf, {TAG_NODE_KIND: node_type, TAG_NODE_TYPE: node_type}, 1)
    (worker,) = p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})
    assert instance(worker).get("InstanceLifecycle") == "spot"
    assert instance(worker)["InstanceType"] == "m5.large"
    p.terminate_nodes(p.non_terminated_nodes({}))
    assert p.non_terminated_nodes({}) == []


def test_up_launches_the_head_then_fails_clearly_when_its_ssh_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's instances run nothing: `up` bootstraps (key pair under ~/.ssh), launches
    the head and waits for its sshd, then raises a HeadSetupError naming the head's
    address and the wait; `down` terminates the head."""
    from rayfield.autoscaler import commands, head_monitor
    from rayfield.autoscaler.command_runner import SSHCommandRunner

    monkeypatch.setenv("HOME", str(tmp_path))
    name = cluster_name()
    cfg = config(name, cluster_dir=str(tmp_path / "state"), use_internal_ips=True)
    cfg["stop_ray_commands"] = []  # `down` would wait for the unreachable head's sshd again
    said: list[str] = []
    with pytest.raises(commands.HeadSetupError) as err:
        commands.create_or_update(cfg, echo=said.append, ssh_timeout_s=1)
    p = get_node_provider(cfg["provider"], name)
    (head,) = p.non_terminated_nodes({TAG_NODE_KIND: KIND_HEAD})
    ip = p.internal_ip(head)
    assert ip and err.value.node_id == head and err.value.host == ip
    assert f"the head {head} at {ip}: " in str(err.value)
    assert "did not answer ssh within 1 s" in str(err.value)
    assert p.node_tags(head)[TAG_NODE_STATUS] == STATUS_UPDATE_FAILED
    assert any("starting the head" in line for line in said)
    key = tmp_path / ".ssh" / f"rayfield-{name}-{REGION}.pem"
    assert key.is_file()  # bootstrapped
    # The monitor would run on the head: none was started on this machine, and the
    # launcher noted nothing copied to the head, so `down` does not reach for it.
    assert not (tmp_path / "state" / "monitor.pid").exists()
    state = commands.provider_for(cfg)
    assert head_monitor.RECORD_KEY not in state.records().get(head, {})

    # What the head's monitor would get: the head's IAM profile as its credentials,
    # the copied key, internal addresses, and no secret.
    boot = head_monitor.head_bootstrap(AWSNodeProvider.bootstrap_config(cfg))
    head_conf = boot["available_node_types"][boot["head_node_type"]]["node_config"]
    assert head_conf["IamInstanceProfile"]["Arn"].endswith(f"/{IAM_PROFILE_NAME}")
    assert boot["auth"]["ssh_private_key"] == f"~/rayfield-cluster-{name}/ssh_key"
    assert boot["provider"]["use_internal_ips"] is True
    text = yaml.safe_dump(boot)
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in text
    assert key.read_text().strip().splitlines()[1] not in text

    ssh_calls: list[str] = []
    monkeypatch.setattr(SSHCommandRunner, "run", lambda self, cmd, *a, **k: ssh_calls.append(cmd))
    assert commands.teardown(cfg, echo=said.append) == 1
    assert p.non_terminated_nodes({}) == []
    assert ssh_calls == []  # nothing waited for the unreachable head
