"""``bootstrap_aws``: fill what an ``aws`` cluster config leaves out, creating the AWS
resources it needs. Each step keeps what the config already gives.

- **Subnets**: every node type without ``SubnetIds``/``SubnetId`` gets the subnets of
  the default VPC (those in ``provider.availability_zone``, a comma-separated list,
  when set); launches go round-robin over them.
- **Security group** ``rayfield-autoscaler-<cluster>`` in the subnets' VPC: every
  port open to members of the same group only, and SSH (22/tcp) from
  ``provider.ssh_source_cidr`` (default ``0.0.0.0/0``) so the launcher can reach the
  nodes. The GCS, the object store and the workers' ports are not reachable from
  outside. Node types without ``SecurityGroupIds`` get it.
- **Key pair** (when ``auth.ssh_private_key`` is not set) ``rayfield-<cluster>-<region>``,
  its private key written to ``~/.ssh/rayfield-<cluster>-<region>.pem`` with mode 0600
  (created 0600, never readable by others, even for an instant; ``~/.ssh`` made or
  checked private, 0700, and a key found there checked to be this user's, through
  :mod:`rayfield.util.private_files`). A key pair that exists in
  AWS but whose file is missing here cannot be used: the next free name
  (``..._1``, ``..._2``) is taken. Node types get ``KeyName``.
- **IAM instance profile** ``rayfield-autoscaler-v1`` for the head (when its node
  config has no ``IamInstanceProfile``): a role EC2 may assume, allowed to manage EC2
  instances and pass itself, so that an autoscaler on the head can launch workers.
  IAM is eventually consistent: on real AWS a profile made seconds ago can be refused
  by ``RunInstances`` for a short while (the launch then fails and is retried with
  the node type's backoff).

Nothing secret is logged or tagged: the log names the key file's path, never its
contents.

Sources:
    Ray 0.7 ``autoscaler/aws/config.py`` (spec 5.5).
"""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any

from rayfield.autoscaler.provider_base import ProviderError
from rayfield.autoscaler.providers.aws_api import aws_client, aws_error
from rayfield.util import private_files

__all__ = ["IAM_PROFILE_NAME", "bootstrap_aws", "key_path", "security_group_name"]

logger = logging.getLogger(__name__)

IAM_PROFILE_NAME = "rayfield-autoscaler-v1"
_ASSUME_EC2 = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}
_HEAD_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": "ec2:*", "Resource": "*"},
        {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"},
    ],
}
_MAX_KEY_TRIES = 10


def security_group_name(cluster_name: str) -> str:
    """The name of the cluster's security group."""
    return f"rayfield-autoscaler-{cluster_name}"


def key_path(key_name: str) -> Path:
    """Where the private key of the key pair ``key_name`` is kept: ``~/.ssh/<name>.pem``."""
    return Path.home() / ".ssh" / f"{key_name}.pem"


def bootstrap_aws(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of the prepared ``config`` with subnets, security group, key pair and the
    head's IAM instance profile filled (see the module docstring).

    Raises:
        ProviderError: an AWS call failed (the message has AWS's error code), no subnet
            matches ``provider.availability_zone``, or ``auth.ssh_private_key`` is set
            while a node type has no ``KeyName``.
    """
    cfg = copy.deepcopy(config)
    provider = cfg["provider"]
    ec2 = aws_client(provider, "ec2")
    types = cfg["available_node_types"]
    try:
        vpc = _subnets(ec2, provider, types)
        group_id = _security_group(ec2, provider, cfg["cluster_name"], vpc)
        for t in types.values():
            t["node_config"].setdefault("SecurityGroupIds", [group_id])
        _key_pair(ec2, cfg)
        head_conf = types[cfg["head_node_type"]]["node_config"]
        if "IamInstanceProfile" not in head_conf:
            arn = _instance_profile(aws_client(provider, "iam"))
            head_conf["IamInstanceProfile"] = {"Arn": arn}
    except ProviderError:
        raise
    except Exception as exc:  # botocore ClientError
        raise ProviderError(f"bootstrapping the AWS cluster failed ({aws_error(exc)})") from None
    return cfg


def _subnets(ec2: Any, provider: dict[str, Any], types: dict[str, Any]) -> str:
    """Fill ``SubnetIds``; the VPC they are in."""
    given = [
        s
        for t in types.values()
        for s in (t["node_config"].get("SubnetIds") or [t["node_config"].get("SubnetId")])
        if s
    ]
    if given:
        found = ec2.describe_subnets(SubnetIds=sorted(set(given)))["Subnets"]
        vpcs = {s["VpcId"] for s in found}
        if len(vpcs) != 1:
            raise ProviderError(
                f"the node types' subnets are in {len(vpcs)} VPCs ({sorted(vpcs)}): "
                "use subnets of one VPC"
            )
        vpc = vpcs.pop()
    else:
        vpc = ""
    filters = (
        [{"Name": "vpc-id", "Values": [vpc]}]
        if vpc
        else [{"Name": "default-for-az", "Values": ["true"]}]
    )
    subnets = ec2.describe_subnets(Filters=filters)["Subnets"]
    zones = [z.strip() for z in provider.get("availability_zone", "").split(",") if z.strip()]
    if zones:
        subnets = [s for s in subnets if s["AvailabilityZone"] in zones]
    subnets.sort(key=lambda s: (s["AvailabilityZone"], s["SubnetId"]))
    if not subnets:
        where = f"availability zones {zones}" if zones else "the default VPC"
        raise ProviderError(
            f"no subnet in {where} of {provider['region']}: give SubnetIds in the node "
            "configs, or other provider.availability_zone values"
        )
    ids = [s["SubnetId"] for s in subnets]
    for t in types.values():
        conf = t["node_config"]
        if "SubnetId" not in conf and "NetworkInterfaces" not in conf:
            conf.setdefault("SubnetIds", ids)
    return vpc or subnets[0]["VpcId"]


def _security_group(ec2: Any, provider: dict[str, Any], cluster: str, vpc: str) -> str:
    """The cluster's group in ``vpc`` (created when missing, rules added when missing)."""
    name = security_group_name(cluster)
    found = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc]}]
    )["SecurityGroups"]
    if found:
        group = found[0]
    else:
        group_id = ec2.create_security_group(
            GroupName=name, Description=f"rayfield cluster {cluster}", VpcId=vpc
        )["GroupId"]
        logger.info("created security group %s (%s) in %s", name, group_id, vpc)
        group = {"GroupId": group_id, "IpPermissions": []}
    group_id = group["GroupId"]
    have = group.get("IpPermissions", [])
    inside = any(
        p.get("IpProtocol") == "-1"
        and any(g.get("GroupId") == group_id for g in p.get("UserIdGroupPairs", []))
        for p in have
    )
    ssh = any(p.get("FromPort") == 22 and p.get("IpRanges") for p in have)
    wanted: list[dict[str, Any]] = []
    if not inside:
        wanted.append({"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]})
    if not ssh:
        cidr = provider.get("ssh_source_cidr", "0.0.0.0/0")
        wanted.append(
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": cidr}]}
        )
    if wanted:
        ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=wanted)
    return str(group_id)


def _key_pair(ec2: Any, cfg: dict[str, Any]) -> None:
    """Fill ``KeyName`` and ``auth.ssh_private_key`` (a new key pair when none is set)."""
    types, auth = cfg["available_node_types"], cfg["auth"]
    if auth.get("ssh_private_key"):
        missing = [n for n, t in types.items() if "KeyName" not in t["node_config"]]
        if missing:
            raise ProviderError(
                f"auth.ssh_private_key is set, so node types {missing} need node_config.KeyName "
                "(the EC2 key pair of that key); or leave ssh_private_key out to have one made"
            )
        return
    base = f"rayfield-{cfg['cluster_name']}-{cfg['provider']['region']}"
    for i in range(_MAX_KEY_TRIES):
        name = base if i == 0 else f"{base}_{i}"
        path = key_path(name)
        exists = bool(
            ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])["KeyPairs"]
        )
        if exists and path.is_file():
            private_files.check_owned(path, "the key pair's private key")
            break
        if not exists and not path.exists():
            material = ec2.create_key_pair(KeyName=name)["KeyMaterial"]
            _write_private(path, material)
            logger.info("created key pair %s, private key in %s", name, path)
            break
    else:
        raise ProviderError(
            f"key pairs {base}..._{_MAX_KEY_TRIES - 1} all exist in AWS without their "
            f"private key under {key_path(base).parent}: delete unused ones or set "
            "auth.ssh_private_key"
        )
    auth["ssh_private_key"] = str(path)
    for t in types.values():
        t["node_config"].setdefault("KeyName", name)


def _write_private(path: Path, text: str) -> None:
    """Write a new private key to ``path``, mode 0600 from its creation, never over an
    existing file or through a symlink; its directory (``~/.ssh``) is made or checked
    private (0700) first.

    Raises:
        UnsafeFileError: the directory, or one above it, is not this user's alone.
        FileExistsError: ``path`` exists.
    """
    private_files.ensure_private_dir(path.parent, what="the SSH key directory")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _instance_profile(iam: Any) -> str:
    """The ARN of the head's instance profile (role and profile created when missing)."""
    name = IAM_PROFILE_NAME
    try:
        profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    except iam.exceptions.NoSuchEntityException:
        try:
            iam.get_role(RoleName=name)
        except iam.exceptions.NoSuchEntityException:
            iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(_ASSUME_EC2))
            iam.put_role_policy(
                RoleName=name, PolicyName="rayfield-head", PolicyDocument=json.dumps(_HEAD_POLICY)
            )
        profile = iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        logger.info("created IAM instance profile %s", name)
    if not profile.get("Roles"):
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return str(profile["Arn"])
