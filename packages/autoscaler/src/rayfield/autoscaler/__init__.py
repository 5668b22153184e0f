"""rayfield-autoscaler: the cluster launcher and autoscaler.

Public pieces: :mod:`rayfield.autoscaler.config` (the cluster YAML),
:mod:`rayfield.autoscaler.decisions` (the pure scaling policy),
:mod:`rayfield.autoscaler.node_provider` (the ``NodeProvider`` interface) and the
``rayfield-autoscaler`` command (:mod:`rayfield.autoscaler.cli`).
"""

from __future__ import annotations

from rayfield.autoscaler.config import ConfigError, load_config, prepare_config
from rayfield.autoscaler.decisions import Decision, NodeTypeSpec, NodeView, ScalingPolicy
from rayfield.autoscaler.node_provider import NodeProvider, ProviderError, get_node_provider

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
