"""``bootstrap_gcp``: fill what a ``gcp`` cluster config leaves out, creating the
Google Cloud resources it needs. Each step keeps what the config already gives.

- **Network tag and firewall rules**: every node type gets the network tag
  ``rayfield-<cluster>``; on the nodes' network, made when missing,
  ``rayfield-<cluster>-internal`` (all traffic from instances with the tag) and
  ``rayfield-<cluster>-ssh`` (22/tcp from ``provider.ssh_source_cidr``, default
  ``0.0.0.0/0``). The default network's own ``default-allow-internal`` rule still
  opens its instances to the whole network: use a network of your own to keep the
  head's ports inside the cluster.
- **SSH key** (when ``auth.ssh_private_key`` is not set): a key of the cluster's own,
  ``~/.ssh/rayfield-<cluster>-gcp-<project>.pem`` (ed25519, made by ``ssh-keygen``,
  mode 0600; ``~/.ssh`` made or checked private, 0700, and the key checked to be this
  user's, through :mod:`rayfield.util.private_files`), whose public key goes into the
  ``ssh-keys`` metadata item of every node type's instances (``<ssh_user>:<public key>
  <ssh_user>``, the guest agent's format).
  The reference writes the project's metadata instead; instance metadata lets only
  this cluster's instances accept the key and needs no project-wide permission. With
  OS Login enabled on the project, metadata keys are ignored: give
  ``auth.ssh_private_key`` of an OS Login key then.
- **The head's service account** (when the head's node config has no
  ``serviceAccounts``): ``rayfield-autoscaler-sa-v1@<project>.iam.gserviceaccount.com``,
  created when missing (IAM API) and granted :data:`HEAD_ROLES` on the project
  (Resource Manager's ``getIamPolicy``/``setIamPolicy``: a read-modify-write guarded by
  the policy's etag), then attached to the head with the ``cloud-platform`` scope. The
  monitor on the head authenticates as it through the metadata server: no key file is
  made or copied. IAM is eventually consistent: a policy that names an account made
  seconds ago can be refused; the grant is retried (:data:`IAM_TRIES`, doubling waits).

Nothing secret is logged or put in a config: the log names the key's path, the
metadata holds the public key only.

Sources:
    Ray 0.7 ``autoscaler/gcp/config.py`` (spec 5.5); the IAM API
    (https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts) and
    Resource Manager API (https://cloud.google.com/resource-manager/reference/rest/v1/projects);
    Compute Engine metadata SSH keys
    (https://cloud.google.com/compute/docs/connect/add-ssh-keys#metadata).
"""

from __future__ import annotations

import copy
import logging
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from rayfield.autoscaler.provider_base import ProviderError
from rayfield.autoscaler.providers.gcp_api import gcp_error, google_api
from rayfield.util import private_files

__all__ = [
    "HEAD_ROLES",
    "SERVICE_ACCOUNT_ID",
    "bootstrap_gcp",
    "network_tag",
    "service_account_email",
    "ssh_key_path",
]

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_ID = "rayfield-autoscaler-sa-v1"
#: What the head's monitor needs: create, label and delete instances (and use the
#: network), and launch workers that run as a service account of the user's.
HEAD_ROLES = ("roles/compute.instanceAdmin.v1", "roles/iam.serviceAccountUser")
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
IAM_TRIES = 5
IAM_RETRY_S = 2.0  # the first wait between two tries; doubled each time


def network_tag(cluster_name: str) -> str:
    """The network tag of the cluster's instances."""
    return re.sub(r"[^a-z0-9-]", "-", f"rayfield-{cluster_name}".lower())[:52]


def service_account_email(project: str) -> str:
    """The head's service account in ``project``."""
    return f"{SERVICE_ACCOUNT_ID}@{project}.iam.gserviceaccount.com"


def ssh_key_path(cluster_name: str, project: str) -> Path:
    """Where the cluster's private SSH key is kept."""
    return Path.home() / ".ssh" / f"rayfield-{cluster_name}-gcp-{project}.pem"


def bootstrap_gcp(provider: Any, config: dict[str, Any]) -> dict[str, Any]:
    """A copy of the prepared ``config`` with network tag, firewall rules, SSH key and
    the head's service account filled (see the module docstring).

    Args:
        provider: the cluster's ``GCPNodeProvider`` (its Compute Engine client).
        config: a prepared ``gcp`` config.

    Raises:
        ProviderError: a Google API refused a call (the message has the HTTP status),
            or ``ssh-keygen`` is missing or failed.
    """
    cfg = copy.deepcopy(config)
    _firewalls(provider, cfg)
    _ssh_key(cfg, provider.project)
    head = cfg["available_node_types"][cfg["head_node_type"]]["node_config"]
    if "serviceAccounts" not in head:
        email = _service_account(cfg["provider"], provider.project)
        head["serviceAccounts"] = [{"email": email, "scopes": list(SCOPES)}]
    return cfg


def _firewalls(provider: Any, cfg: dict[str, Any]) -> None:
    tag = network_tag(provider.cluster_name)
    networks = set()
    for t in cfg["available_node_types"].values():
        conf = t["node_config"]
        items = conf.setdefault("tags", {}).setdefault("items", [])
        if tag not in items:
            items.append(tag)
        nics = conf.get("networkInterfaces") or [{}]
        networks.add(nics[0].get("network", "global/networks/default"))
    source = cfg["provider"].get("ssh_source_cidr", "0.0.0.0/0")
    rules: dict[str, dict[str, Any]] = {
        f"{tag}-internal": {"allowed": [{"IPProtocol": "all"}], "sourceTags": [tag]},
        f"{tag}-ssh": {
            "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
            "sourceRanges": [source],
        },
    }
    firewalls = provider.compute.firewalls()
    project = provider.project
    for network in sorted(networks):
        suffix = "" if len(networks) == 1 else "-" + network.rsplit("/", 1)[-1]
        for name, rule in rules.items():
            name = (name + suffix)[:63]
            if provider._run("read a firewall", firewalls.get(project=project, firewall=name)):
                continue
            body = {
                "name": name,
                "network": network,
                "direction": "INGRESS",
                "targetTags": [tag],
                **rule,
            }
            op = provider._run(
                f"create firewall {name}", firewalls.insert(project=project, body=body)
            )
            provider._wait(f"create firewall {name}", op, zone=False)


def _ssh_key(cfg: dict[str, Any], project: str) -> None:
    """Fill ``auth.ssh_private_key`` with a new key whose public half goes into every
    node type's ``ssh-keys`` metadata (nothing when a key is given)."""
    auth = cfg["auth"]
    if auth.get("ssh_private_key"):
        return
    user = auth.get("ssh_user")
    if not user:
        raise ProviderError("provider type 'gcp' logs in over SSH: set auth.ssh_user")
    path = ssh_key_path(cfg["cluster_name"], project)
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise ProviderError(
            "making the cluster's SSH key needs ssh-keygen (OpenSSH's client): install it, "
            "or set auth.ssh_private_key"
        )
    private_files.ensure_private_dir(path.parent, what="the SSH key directory")
    if not path.is_file():
        comment = f"rayfield-{cfg['cluster_name']}"
        made = subprocess.run(
            [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            raise ProviderError(f"ssh-keygen could not make {path}: {made.stderr.strip()}")
        logger.info("created SSH key %s for cluster %s", path, cfg["cluster_name"])
    private_files.check_owned(path, "the cluster's SSH key")
    public = subprocess.run(
        [keygen, "-y", "-f", str(path)], capture_output=True, text=True, check=False
    )
    if public.returncode != 0:
        raise ProviderError(f"ssh-keygen cannot read {path}: {public.stderr.strip()}")
    key_type_and_data = " ".join(public.stdout.split()[:2])  # without the key's comment
    line = f"{user}:{key_type_and_data} {user}"
    for t in cfg["available_node_types"].values():
        items = t["node_config"].setdefault("metadata", {}).setdefault("items", [])
        item = next((i for i in items if i.get("key") == "ssh-keys"), None)
        if item is None:
            items.append({"key": "ssh-keys", "value": line})
        elif line not in str(item.get("value", "")).splitlines():
            item["value"] = "\n".join([*str(item.get("value", "")).splitlines(), line])
    auth["ssh_private_key"] = str(path)


def _execute(what: str, request: Any, missing_ok: bool = False) -> Any:
    try:
        return request.execute()
    except Exception as exc:  # googleapiclient.errors.HttpError, transport errors
        if missing_ok and getattr(getattr(exc, "resp", None), "status", None) == 404:
            return None
        raise ProviderError(f"Google Cloud refused to {what} ({gcp_error(exc)})") from exc


def _service_account(provider_config: dict[str, Any], project: str) -> str:
    """The head's service account, created and granted :data:`HEAD_ROLES` when
    missing; its email."""
    email = service_account_email(project)
    accounts = google_api(provider_config, "iam", "v1").projects().serviceAccounts()
    name = f"projects/{project}/serviceAccounts/{email}"
    if _execute("read a service account", accounts.get(name=name), missing_ok=True) is None:
        body = {
            "accountId": SERVICE_ACCOUNT_ID,
            "serviceAccount": {"displayName": "rayfield autoscaler (head node)"},
        }
        try:
            _execute(
                f"create service account {email}",
                accounts.create(name=f"projects/{project}", body=body),
            )
        except ProviderError as exc:  # made meanwhile by another launcher: fine
            if getattr(getattr(exc.__cause__, "resp", None), "status", None) != 409:
                raise
        logger.info("created service account %s", email)
    projects = google_api(provider_config, "cloudresourcemanager", "v1").projects()
    member = f"serviceAccount:{email}"
    for attempt in range(IAM_TRIES):
        policy = _execute(
            f"read the IAM policy of {project}", projects.getIamPolicy(resource=project, body={})
        )
        bindings = policy.setdefault("bindings", [])
        changed = False
        for role in HEAD_ROLES:
            binding = next(
                (b for b in bindings if b.get("role") == role and "condition" not in b), None
            )
            if binding is None:
                bindings.append({"role": role, "members": [member]})
                changed = True
            elif member not in binding.setdefault("members", []):
                binding["members"].append(member)
                changed = True
        if not changed:
            return email
        try:
            _execute(
                f"grant {', '.join(HEAD_ROLES)} to {email}",
                projects.setIamPolicy(resource=project, body={"policy": policy}),
            )
            logger.info("granted %s to %s on %s", ", ".join(HEAD_ROLES), email, project)
            return email
        except ProviderError as exc:
            status = getattr(getattr(exc.__cause__, "resp", None), "status", None)
            # 409: the policy changed since it was read; 400: the new account is not
            # visible to IAM yet. Both pass with time.
            if status not in (400, 409) or attempt == IAM_TRIES - 1:
                raise
            time.sleep(IAM_RETRY_S * 2**attempt)
    raise AssertionError("unreachable")  # the loop returns or raises
