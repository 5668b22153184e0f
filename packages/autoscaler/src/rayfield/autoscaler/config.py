"""The cluster YAML: its schema, validation, defaults and normal form.

A config is checked against :data:`CLUSTER_SCHEMA` (JSON Schema, draft 2020-12) with
``jsonschema``; the first error becomes one :class:`ConfigError` line that names the key
and says how to fix it (an unknown key gets the closest valid name). Then the defaults
are filled and the config is brought to one normal form: ``available_node_types`` (the
later Ray form, several node types each with resources and min/max workers) plus
``head_node_type``. A config in the reference's form (``head_node``/``worker_nodes`` and
global ``min_workers``/``max_workers``) becomes the two types ``head`` and ``worker``.

Sources:
    Ray 0.7 cluster YAML (spec 5.3, the reference's ``example-full.yaml``) and the later
    ``available_node_types``/``upscaling_speed`` keys of Ray's cluster configuration docs
    (https://docs.ray.io/en/latest/cluster/vms/references/ray-cluster-configuration.html).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

__all__ = [
    "CLUSTER_SCHEMA",
    "PROVIDER_TYPES",
    "ConfigError",
    "launch_hash",
    "load_config",
    "prepare_config",
]

# Providers this version can run; the schema accepts only these names.
PROVIDER_TYPES = ("local_process", "local", "aws", "gcp", "kubernetes", "external")

_STR_LIST = {"type": "array", "items": {"type": "string"}}
_RESOURCES = {
    "type": "object",
    "additionalProperties": {"type": "number", "minimum": 0},
    "description": "resources of one node, e.g. {CPU: 4, GPU: 1, custom: 2}",
}
_NODE_TYPE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["resources"],
    "properties": {
        "node_config": {"type": "object"},
        "resources": _RESOURCES,
        "min_workers": {"type": "integer", "minimum": 0},
        "max_workers": {"type": "integer", "minimum": 0},
    },
}
_PROVIDER = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type"],
    "properties": {
        "type": {"enum": list(PROVIDER_TYPES)},
        "cluster_dir": {"type": "string"},
        "link_latest_session": {
            "type": "boolean",
            "description": "local_process: point <tmp>/rayfield-<uid>/session_latest at "
            "the head's session, so init(address='auto') and `rayfield status` on this "
            "machine find the cluster (default true)",
        },
        "region": {"type": "string"},
        "availability_zone": {"type": "string"},
        "module": {"type": "string"},
        "project_id": {"type": "string"},
        "head_ip": {"type": "string"},
        "worker_ips": _STR_LIST,
        "head_python": {
            "type": "string",
            "description": "SSH clusters: the command that runs Python on the head, for "
            "the autoscaler and `submit` (default python3)",
        },
        "use_internal_ips": {"type": "boolean"},
        "cache_stopped_nodes": {"type": "boolean"},
        "extra_config": {"type": "object"},
        # aws/gcp: the API's address when not the cloud's (a test server, a mirror)
        "endpoint_url": {"type": "string"},
        # gcp: other Google APIs' addresses by name (iam, cloudresourcemanager)
        "api_endpoints": {"type": "object", "additionalProperties": {"type": "string"}},
        "ssh_source_cidr": {"type": "string"},  # aws: who may reach port 22
        "namespace": {"type": "string"},  # kubernetes
        # kubernetes: how setup commands reach the pods (the exec API through the
        # client, or kubectl exec) and in which container (default the pod's first)
        "command_runner": {"enum": ["api", "kubectl"]},
        "container": {"type": "string"},
    },
}

CLUSTER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["cluster_name", "provider"],
    "properties": {
        "cluster_name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"},
        "min_workers": {"type": "integer", "minimum": 0},
        "max_workers": {"type": "integer", "minimum": 0},
        "initial_workers": {"type": "integer", "minimum": 0},
        "autoscaling_mode": {"enum": ["default", "aggressive"]},
        "target_utilization_fraction": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
        },
        "idle_timeout_minutes": {"type": "number", "minimum": 0},
        "upscaling_speed": {"type": "number", "exclusiveMinimum": 0},
        "provider": _PROVIDER,
        "auth": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "ssh_user": {"type": "string"},
                "ssh_private_key": {"type": "string"},
                "host_key_checking": {
                    "type": "boolean",
                    "description": "SSH clusters: pin each node's host key at first contact "
                    "in the cluster directory's known_hosts and refuse a changed one "
                    "(default true); false accepts any key (StrictHostKeyChecking=no)",
                },
            },
        },
        "docker": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "image": {"type": "string"},
                "container_name": {"type": "string"},
                "run_options": _STR_LIST,
                "pull_before_run": {"type": "boolean"},
            },
        },
        "head_node": {"type": "object"},
        "worker_nodes": {"type": "object"},
        "available_node_types": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": _NODE_TYPE,
        },
        "head_node_type": {"type": "string"},
        "file_mounts": {"type": "object", "additionalProperties": {"type": "string"}},
        "initialization_commands": _STR_LIST,
        "setup_commands": _STR_LIST,
        "head_setup_commands": _STR_LIST,
        "worker_setup_commands": _STR_LIST,
        "head_start_ray_commands": _STR_LIST,
        "worker_start_ray_commands": _STR_LIST,
        "stop_ray_commands": _STR_LIST,
    },
}

_DEFAULTS: dict[str, Any] = {
    "initial_workers": 0,
    "autoscaling_mode": "default",
    "target_utilization_fraction": 0.8,
    "idle_timeout_minutes": 5,
    "upscaling_speed": 1.0,
    "auth": {},
    "docker": {},
    "file_mounts": {},
    "initialization_commands": [],
    "setup_commands": [],
    "head_setup_commands": [],
    "worker_setup_commands": [],
    "head_start_ray_commands": [],
    "worker_start_ray_commands": [],
    "stop_ray_commands": [],
}

# Per provider type: what its ``provider`` section gets when left out.
_PROVIDER_DEFAULTS: dict[str, dict[str, Any]] = {
    "local_process": {"use_internal_ips": True},
    "local": {"use_internal_ips": True, "worker_ips": []},
    "aws": {"use_internal_ips": False, "cache_stopped_nodes": True},
    "gcp": {"use_internal_ips": False},
    "kubernetes": {"use_internal_ips": True, "namespace": "default"},
    "external": {},
}
# Per provider type: the provider keys it cannot do without.
_PROVIDER_REQUIRED: dict[str, tuple[str, ...]] = {
    "aws": ("region",),
    "gcp": ("project_id", "region", "availability_zone"),
    "external": ("module",),
}

# What the nodes of an SSH provider run when the config gives no commands: rayfield on
# the PATH, each node's sessions under $RAYFIELD_NODE_TEMP_DIR (node_setup.py).
_START = (
    'rayfield start --node-ip-address="$RAYFIELD_NODE_IP" '
    '--temp-dir="$RAYFIELD_NODE_TEMP_DIR" $RAYFIELD_RESOURCE_ARGS'
)
_STOP = 'rayfield stop --temp-dir="$RAYFIELD_NODE_TEMP_DIR"'
_SSH_COMMAND_DEFAULTS: dict[str, list[str]] = {
    "head_start_ray_commands": [_STOP, f"{_START} --head --port=6379"],
    "worker_start_ray_commands": [_STOP, f'{_START} --address="$RAYFIELD_ADDRESS"'],
    "stop_ray_commands": [_STOP],
}

# A node type of the reference's form, when ``head_node``/``worker_nodes`` give none.
_DEFAULT_RESOURCES = {"CPU": 1}


class ConfigError(ValueError):
    """The cluster YAML is not valid; the message names the key and the fix."""


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the config"


def _message(err: jsonschema.ValidationError) -> str:
    where = _path(err.absolute_path)
    schema, inst = err.schema, err.instance
    if err.validator == "additionalProperties" and isinstance(inst, dict):
        known = sorted(schema.get("properties", {}))
        extra = sorted(k for k in inst if k not in known)
        key = extra[0] if extra else "?"
        name = f"{where}.{key}" if err.absolute_path else key
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(known)}"
        return f"unknown config key {name!r}: {hint}"
    if err.validator == "required":
        return f"{where} is missing a required key: {err.message.split(' is ')[0]}"
    if err.validator == "type":
        return (
            f"config key {where!r} has the wrong type: expected {schema['type']}, "
            f"got {type(inst).__name__} {inst!r}"
        )
    if err.validator == "enum":
        allowed = ", ".join(repr(v) for v in schema["enum"])
        return f"config key {where!r} is {inst!r}: it must be one of {allowed}"
    return f"config key {where!r}: {err.message}"


def _check_schema(config: Any) -> None:
    if not isinstance(config, dict):
        raise ConfigError(
            f"the cluster config must be a mapping of keys, not {type(config).__name__}"
        )
    validator = jsonschema.Draft202012Validator(CLUSTER_SCHEMA)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        raise ConfigError(_message(errors[0]))


def _node_types(cfg: dict[str, Any]) -> None:
    """Fill ``available_node_types``/``head_node_type`` (the normal form) in place."""
    if "available_node_types" in cfg:
        for legacy in ("head_node", "worker_nodes"):
            if legacy in cfg:
                raise ConfigError(
                    f"{legacy!r} and 'available_node_types' exclude each other: describe "
                    "every node type under available_node_types"
                )
        types = cfg["available_node_types"]
        head = cfg.get("head_node_type")
        if head is None:
            raise ConfigError(
                "'head_node_type' is required with 'available_node_types': name the type "
                f"the head uses (one of {', '.join(sorted(types))})"
            )
        if head not in types:
            close = difflib.get_close_matches(head, list(types), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"one of {', '.join(sorted(types))}"
            raise ConfigError(f"head_node_type {head!r} is not in available_node_types: {hint}")
        for name, t in types.items():
            # a copy each: a YAML anchor must not tie two types' node configs together
            t["node_config"] = copy.deepcopy(t.get("node_config", {}))
            t.setdefault("min_workers", 0)
            t.setdefault("max_workers", cfg.get("max_workers", t["min_workers"]))
            if t["min_workers"] > t["max_workers"]:
                raise ConfigError(
                    f"available_node_types.{name}: min_workers {t['min_workers']} exceeds "
                    f"max_workers {t['max_workers']}"
                )
        if "max_workers" not in cfg:
            cfg["max_workers"] = sum(t["max_workers"] for n, t in types.items() if n != head)
        return
    if "max_workers" not in cfg:
        raise ConfigError("the config is missing a required key: 'max_workers'")
    # Copies: a YAML anchor (or one dict given twice) must not tie the two together.
    head_cfg = copy.deepcopy(cfg.pop("head_node", {}) or {})
    worker_cfg = copy.deepcopy(cfg.pop("worker_nodes", {}) or {})
    cfg["available_node_types"] = {
        "head": {
            "node_config": head_cfg,
            "resources": dict(head_cfg.get("resources", _DEFAULT_RESOURCES)),
            "min_workers": 0,
            "max_workers": 0,
        },
        "worker": {
            "node_config": worker_cfg,
            "resources": dict(worker_cfg.get("resources", _DEFAULT_RESOURCES)),
            "min_workers": cfg.pop("min_workers", 0),
            "max_workers": cfg["max_workers"],
        },
    }
    cfg["head_node_type"] = "head"


def prepare_config(config: Any) -> dict[str, Any]:
    """A validated copy of ``config`` in normal form, with every default filled.

    The normal form is a valid input too: preparing it again gives the same config.

    Args:
        config: the parsed cluster YAML (a mapping).

    Returns:
        A new dict: the keys of :data:`CLUSTER_SCHEMA` with defaults, the provider
        section with its provider's defaults, ``available_node_types`` and
        ``head_node_type`` always present (each type with ``node_config``,
        ``resources``, ``min_workers``, ``max_workers``); no top-level ``min_workers``,
        ``head_node`` or ``worker_nodes`` (they went into the types).

    Raises:
        ConfigError: a required key is missing, a key is unknown (the message names the
            closest valid one), a value has the wrong type or range, ``min_workers``
            exceeds ``max_workers``, or ``head_node_type`` names no type.
    """
    _check_schema(config)
    if "available_node_types" in config and "min_workers" in config:
        raise ConfigError(
            "top-level 'min_workers' is for the head_node/worker_nodes form: with "
            "available_node_types, set min_workers on each node type"
        )
    cfg = copy.deepcopy(config)
    for key, value in _DEFAULTS.items():
        cfg.setdefault(key, copy.deepcopy(value))
    for key, value in _PROVIDER_DEFAULTS[cfg["provider"]["type"]].items():
        cfg["provider"].setdefault(key, value)
    for key in _PROVIDER_REQUIRED.get(cfg["provider"]["type"], ()):
        if not cfg["provider"].get(key):
            raise ConfigError(f"provider type {cfg['provider']['type']!r} needs provider.{key}")
    if cfg.get("min_workers", 0) > cfg.get("max_workers", cfg.get("min_workers", 0)):
        raise ConfigError(
            f"min_workers {cfg['min_workers']} exceeds max_workers {cfg['max_workers']}: "
            "max_workers takes precedence, lower min_workers"
        )
    _node_types(cfg)
    if cfg["provider"]["type"] == "local":
        _local(cfg)
    if cfg["provider"]["type"] != "local_process":  # nodes set up over SSH
        for key, commands in _SSH_COMMAND_DEFAULTS.items():
            if not cfg[key]:
                cfg[key] = list(commands)
    return cfg


def _local(cfg: dict[str, Any]) -> None:
    """Check and fill what the ``local`` (SSH) provider needs, in place."""
    provider, auth = cfg["provider"], cfg["auth"]
    if not provider.get("head_ip"):
        raise ConfigError("provider type 'local' needs provider.head_ip: the head's address")
    for key in ("ssh_user", "ssh_private_key"):
        if not auth.get(key):
            raise ConfigError(f"provider type 'local' logs in over SSH: set auth.{key}")
    n = len(provider["worker_ips"])
    if cfg["max_workers"] > n:
        raise ConfigError(
            f"max_workers {cfg['max_workers']} exceeds the {n} machines of "
            "provider.worker_ips: list more, or lower max_workers"
        )


def load_config(
    path: str | Path, overrides: dict[str, Any] | None = None, *, private: bool = False
) -> dict[str, Any]:
    """Read, override and prepare the cluster YAML at ``path``.

    Args:
        path: the YAML file.
        overrides: top-level keys set before validation (``cluster_name``,
            ``min_workers``, ``max_workers`` from the command line); None values are
            ignored.
        private: read it through :func:`rayfield.util.private_files.read_text` (it must
            be this user's alone, in directories no other user can change): the
            ``bootstrap.yaml`` the monitor loads from the cluster directory.

    Raises:
        ConfigError: the file cannot be read or parsed, or :func:`prepare_config` refuses it.
        UnsafeFileError: ``private`` and the file or a directory above is not this
            user's alone.
    """
    from rayfield.util import private_files

    try:
        raw = yaml.safe_load(private_files.read_text(path) if private else Path(path).read_text())
    except private_files.UnsafeFileError:
        raise
    except OSError as exc:
        raise ConfigError(f"cannot read the cluster config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if isinstance(raw, dict):
        raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return prepare_config(raw)


def launch_hash(config: dict[str, Any], node_type: str) -> str:
    """Hash of what a node of ``node_type`` is launched with (its node config and
    resources, plus ``auth`` without ``host_key_checking``, which changes how the
    launcher connects, not the node); a node whose tag differs is outdated.

    Args:
        config: a config from :func:`prepare_config`.
        node_type: a key of ``available_node_types``.
    """
    t = config["available_node_types"][node_type]
    payload = {"node_config": t["node_config"], "resources": t["resources"]}
    payload["auth"] = {k: v for k, v in config["auth"].items() if k != "host_key_checking"}
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
