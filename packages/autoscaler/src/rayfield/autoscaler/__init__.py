"""rayfield-autoscaler: the cluster launcher and autoscaler.

Public pieces: :mod:`rayfield.autoscaler.config` (the cluster YAML),
:mod:`rayfield.autoscaler.decisions` (the pure scaling policy),
:mod:`rayfield.autoscaler.node_provider` (the ``NodeProvider`` interface) and the
``rayfield-autoscaler`` command (:mod:`rayfield.autoscaler.cli`).

The names below are imported from their modules on first use (PEP 562), so that
importing the package (as ``rayfield-autoscaler --help`` and ``rayfield --help`` do)
loads neither jsonschema nor the launcher.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.autoscaler.config import ConfigError, load_config, prepare_config
    from rayfield.autoscaler.decisions import Decision, NodeTypeSpec, NodeView, ScalingPolicy
    from rayfield.autoscaler.node_provider import NodeProvider, ProviderError, get_node_provider

# public name -> the module that defines it
_WHERE = {
    "ConfigError": "rayfield.autoscaler.config",
    "load_config": "rayfield.autoscaler.config",
    "prepare_config": "rayfield.autoscaler.config",
    "Decision": "rayfield.autoscaler.decisions",
    "NodeTypeSpec": "rayfield.autoscaler.decisions",
    "NodeView": "rayfield.autoscaler.decisions",
    "ScalingPolicy": "rayfield.autoscaler.decisions",
    "NodeProvider": "rayfield.autoscaler.node_provider",
    "ProviderError": "rayfield.autoscaler.node_provider",
    "get_node_provider": "rayfield.autoscaler.node_provider",
}

__all__ = [
    "ConfigError",
    "Decision",
    "NodeProvider",
    "NodeTypeSpec",
    "NodeView",
    "ProviderError",
    "ScalingPolicy",
    "get_node_provider",
    "load_config",
    "prepare_config",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rayfield.autoscaler' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
