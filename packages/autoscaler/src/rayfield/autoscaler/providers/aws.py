"""The ``aws`` provider: each node is an EC2 instance, through boto3 (the ``[aws]`` extra).

A node's id is its instance id. Every instance of a cluster carries the tag
``rayfield-cluster-name: <cluster_name>`` and an AWS ``Name`` tag
(``rayfield-<cluster>-<kind>``); :meth:`AWSNodeProvider.node_tags` returns the others,
the ones the launcher gave (kind, node type, status, launch-config hash, ...). Listing
asks EC2 each time (a ``DescribeInstances`` filtered on those tags and on the states
``pending``/``running``): no cache goes stale when two processes (the launcher and the
monitor) act on one cluster.

``create_node`` launches instances from the node config, which is the keyword
arguments of EC2's ``RunInstances`` (``InstanceType``, ``ImageId``,
``InstanceMarketOptions`` for spot workers, ``IamInstanceProfile``, ``KeyName``,
``SecurityGroupIds``, ...), plus ``SubnetIds``: a list of subnets used in turn, one per
launch. The ``resources`` key (the node type's resources) is not sent. It waits until
the instances run, so that their addresses are known when it returns.

With ``provider.cache_stopped_nodes`` (default true, as the reference) terminating a
node stops it instead (a spot instance, which cannot be stopped, is terminated), and
the next ``create_node`` with the same node kind, type and launch-config hash starts
stopped instances before it launches new ones.

:mod:`rayfield.autoscaler.providers.aws_bootstrap` fills what a config leaves out: the
key pair, the security group, the IAM instance profile of the head, the subnets.

Sources:
    Ray 0.7 ``autoscaler/aws/node_provider.py`` (spec 5.2, 5.5); boto3's EC2 client
    (https://boto3.amazonaws.com/v1/documentation/api/latest/reference/services/ec2.html).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rayfield.autoscaler.provider_base import (
    TAG_CLUSTER_NAME,
    TAG_LAUNCH_CONFIG,
    TAG_NODE_KIND,
    TAG_NODE_TYPE,
    NodeProvider,
    ProviderError,
)
from rayfield.autoscaler.providers.aws_api import aws_client, aws_error

__all__ = ["AWSNodeProvider", "aws_client"]

logger = logging.getLogger(__name__)

_LIVE = ("pending", "running")
_GONE = ("shutting-down", "terminated")
# Tags the provider sets itself and node_tags() leaves out.
_OWN_TAGS = ("Name", TAG_CLUSTER_NAME)
# Keys of a node config that are rayfield's, not RunInstances arguments.
_NOT_EC2 = ("resources", "SubnetIds")
# How long create_node waits for launched instances to run (s).
RUNNING_TIMEOUT_S = 600


class AWSNodeProvider(NodeProvider):
    """EC2 instances as nodes (see the module docstring).

    Args:
        provider_config: ``type: aws``, ``region``; optionally ``endpoint_url``,
            ``cache_stopped_nodes`` (default true).
        cluster_name: the value of every node's ``rayfield-cluster-name`` tag.

    Raises:
        ProviderError: boto3 is missing or no region is set.
    """

    #: Instances run nothing until NodeSetup sets them up over SSH.
    needs_setup = True
    #: Seconds between two looks at launched instances' state in ``create_node``.
    running_poll_s = 2.0

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self.ec2 = aws_client(provider_config, "ec2")
        self.cache_stopped_nodes = bool(provider_config.get("cache_stopped_nodes", True))
        self._subnet_turn = 0
        self._lock = threading.Lock()

    @classmethod
    def bootstrap_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        """The config with key pair, security group, IAM profile and subnets filled
        (:func:`rayfield.autoscaler.providers.aws_bootstrap.bootstrap_aws`)."""
        from rayfield.autoscaler.providers.aws_bootstrap import bootstrap_aws

        return bootstrap_aws(config)

    # ---- queries -----------------------------------------------------------------------

    def _filters(self, tags: dict[str, str], states: tuple[str, ...]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [
            {"Name": f"tag:{TAG_CLUSTER_NAME}", "Values": [self.cluster_name]},
            {"Name": "instance-state-name", "Values": list(states)},
        ]
        out += [{"Name": f"tag:{k}", "Values": [v]} for k, v in sorted(tags.items())]
        return out

    def _describe(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        try:
            for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
                for reservation in page["Reservations"]:
                    found.extend(reservation["Instances"])
        except Exception as exc:  # botocore's ClientError / EndpointConnectionError
            raise ProviderError(f"EC2 DescribeInstances failed ({aws_error(exc)})") from None
        return sorted(found, key=lambda i: (i["LaunchTime"], i["InstanceId"]))

    def _instance(self, node_id: str) -> dict[str, Any] | None:
        filters = self._filters({}, (*_LIVE, "stopping", "stopped", *_GONE))
        found = self._describe([*filters, {"Name": "instance-id", "Values": [node_id]}])
        return found[0] if found else None

    def _known(self, node_id: str) -> dict[str, Any]:
        inst = self._instance(node_id)
        if inst is None:
            raise ProviderError(f"cluster {self.cluster_name!r} has no EC2 instance {node_id!r}")
        return inst

    # ---- NodeProvider ------------------------------------------------------------------

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        return [i["InstanceId"] for i in self._describe(self._filters(tag_filters, _LIVE))]

    def is_running(self, node_id: str) -> bool:
        inst = self._instance(node_id)
        return inst is not None and inst["State"]["Name"] == "running"

    def is_terminated(self, node_id: str) -> bool:
        inst = self._instance(node_id)
        return inst is None or inst["State"]["Name"] not in _LIVE

    def node_tags(self, node_id: str) -> dict[str, str]:
        tags = self._known(node_id).get("Tags", [])
        return {t["Key"]: t["Value"] for t in tags if t["Key"] not in _OWN_TAGS}

    def external_ip(self, node_id: str) -> str | None:
        inst = self._instance(node_id)
        return inst.get("PublicIpAddress") if inst else None

    def internal_ip(self, node_id: str) -> str | None:
        inst = self._instance(node_id)
        return inst.get("PrivateIpAddress") if inst else None

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        self._known(node_id)
        self._tag([node_id], tags)

    def _tag(self, ids: list[str], tags: dict[str, str]) -> None:
        pairs = [{"Key": k, "Value": str(v)} for k, v in tags.items()]
        try:
            self.ec2.create_tags(Resources=ids, Tags=pairs)
        except Exception as exc:
            raise ProviderError(f"EC2 CreateTags on {ids} failed ({aws_error(exc)})") from None

    def _all_tags(self, tags: dict[str, str]) -> dict[str, str]:
        kind = tags.get(TAG_NODE_KIND, "node")
        return {
            **tags,
            TAG_CLUSTER_NAME: self.cluster_name,
            "Name": f"rayfield-{self.cluster_name}-{kind}",
        }

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        all_tags = self._all_tags(tags)
        ids = self._restart_stopped(all_tags, count) if self.cache_stopped_nodes else []
        if len(ids) < count:
            ids += self._launch(node_config, all_tags, count - len(ids))
        try:
            self.ec2.get_waiter("instance_running").wait(
                InstanceIds=ids,
                WaiterConfig={
                    "Delay": self.running_poll_s,
                    "MaxAttempts": int(RUNNING_TIMEOUT_S / self.running_poll_s),
                },
            )
        except Exception as exc:
            raise ProviderError(
                f"EC2 instances {ids} did not reach 'running' within {RUNNING_TIMEOUT_S} s "
                f"({aws_error(exc)}); see their state in the EC2 console"
            ) from None

    def _restart_stopped(self, tags: dict[str, str], count: int) -> list[str]:
        """Start up to ``count`` stopped instances of the same kind, type and launch
        config; retag them with ``tags``; their ids."""
        same = {k: tags[k] for k in (TAG_NODE_KIND, TAG_NODE_TYPE, TAG_LAUNCH_CONFIG) if k in tags}
        with self._lock:  # two launch threads must not start the same instance
            ids = [i["InstanceId"] for i in self._describe(self._filters(same, ("stopped",)))]
            ids = ids[:count]
            if not ids:
                return []
            try:
                self.ec2.start_instances(InstanceIds=ids)
            except Exception as exc:
                raise ProviderError(f"EC2 StartInstances {ids} failed ({aws_error(exc)})") from None
        self._tag(ids, tags)
        logger.info("started %d stopped instance(s) of %s: %s", len(ids), self.cluster_name, ids)
        return ids

    def _launch(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> list[str]:
        conf = {k: v for k, v in node_config.items() if k not in _NOT_EC2}
        subnets = node_config.get("SubnetIds") or []
        if subnets and "SubnetId" not in conf and "NetworkInterfaces" not in conf:
            with self._lock:
                conf["SubnetId"] = subnets[self._subnet_turn % len(subnets)]
                self._subnet_turn += 1
        specs = [
            s for s in conf.pop("TagSpecifications", []) if s.get("ResourceType") != "instance"
        ]
        user = [
            t
            for s in node_config.get("TagSpecifications", [])
            if s.get("ResourceType") == "instance"
            for t in s.get("Tags", [])
            if t["Key"] not in tags
        ]
        instance_tags = user + [{"Key": k, "Value": str(v)} for k, v in tags.items()]
        specs.append({"ResourceType": "instance", "Tags": instance_tags})
        try:
            out = self.ec2.run_instances(
                MinCount=count, MaxCount=count, TagSpecifications=specs, **conf
            )
        except Exception as exc:
            raise ProviderError(
                f"EC2 refused to launch {count} instance(s) of {self.cluster_name!r} "
                f"({aws_error(exc)}): check the node config (InstanceType, ImageId, SubnetIds) "
                "and the account's limits"
            ) from None
        ids = [i["InstanceId"] for i in out["Instances"]]
        logger.info("launched %d instance(s) of %s: %s", count, self.cluster_name, ids)
        return ids

    def terminate_node(self, node_id: str) -> None:
        self.terminate_nodes([node_id])

    def terminate_nodes(self, node_ids: list[str]) -> None:
        """Stop (``cache_stopped_nodes``) or terminate the nodes; spot instances and
        nodes already gone or unknown are terminated or skipped."""
        insts = [i for n in node_ids if (i := self._instance(n)) is not None]
        live = [i for i in insts if i["State"]["Name"] not in _GONE]
        stop = [
            i["InstanceId"]
            for i in live
            if self.cache_stopped_nodes and i.get("InstanceLifecycle") != "spot"
        ]
        end = [i["InstanceId"] for i in live if i["InstanceId"] not in stop]
        try:
            if stop:
                self.ec2.stop_instances(InstanceIds=stop)
            if end:
                self.ec2.terminate_instances(InstanceIds=end)
        except Exception as exc:
            raise ProviderError(
                f"EC2 could not stop/terminate {stop + end} ({aws_error(exc)})"
            ) from None
