"""The registry of provider types: :func:`get_node_provider` builds the provider a
config's ``provider`` section names (a built-in type, or an ``external`` class by dotted
path). The ``NodeProvider`` interface, ``ProviderError`` and the node tags are defined in
:mod:`rayfield.autoscaler.provider_base` and exported here too (the providers import
them from there: this module imports the built-in providers).

Call order: the launcher and the monitor build one provider per cluster
(``get_node_provider(config["provider"], config["cluster_name"])``), then list nodes with
:meth:`NodeProvider.non_terminated_nodes`, read and write their tags, create nodes with
:meth:`NodeProvider.create_node` and remove them with :meth:`NodeProvider.terminate_node`;
:meth:`NodeProvider.cleanup` ends the provider's use.

Sources:
    Ray 0.7 ``NodeProvider`` and ``tags.py`` (spec 5.2).
"""

from __future__ import annotations

import importlib
from typing import Any

from rayfield.autoscaler.provider_base import (
    KIND_HEAD as KIND_HEAD,
)
from rayfield.autoscaler.provider_base import (
    KIND_WORKER as KIND_WORKER,
)
from rayfield.autoscaler.provider_base import (
    STATUS_SETTING_UP,
    STATUS_SYNCING_FILES,
    STATUS_UNINITIALIZED,
    STATUS_UP_TO_DATE,
    STATUS_UPDATE_FAILED,
    STATUS_WAITING_FOR_SSH,
    TAG_CLUSTER_NAME,
    TAG_LAUNCH_CONFIG,
    TAG_NODE_KIND,
    TAG_NODE_NAME,
    TAG_NODE_STATUS,
    TAG_NODE_TYPE,
    TAG_RUNTIME_CONFIG,
    NodeProvider,
    ProviderError,
)

__all__ = [
    "STATUS_SETTING_UP",
    "STATUS_SYNCING_FILES",
    "STATUS_UNINITIALIZED",
    "STATUS_UPDATE_FAILED",
    "STATUS_UP_TO_DATE",
    "STATUS_WAITING_FOR_SSH",
    "TAG_CLUSTER_NAME",
    "TAG_LAUNCH_CONFIG",
    "TAG_NODE_KIND",
    "TAG_NODE_NAME",
    "TAG_NODE_STATUS",
    "TAG_NODE_TYPE",
    "TAG_RUNTIME_CONFIG",
    "NodeProvider",
    "ProviderError",
    "get_node_provider",
    "provider_class",
]


# provider type -> "module:Class" of the built-in providers (imported on use).
_BUILT_IN = {
    "local": "rayfield.autoscaler.local:LocalNodeProvider",
    "local_process": "rayfield.autoscaler.local_process:LocalProcessProvider",
    "aws": "rayfield.autoscaler.providers.aws:AWSNodeProvider",
    "gcp": "rayfield.autoscaler.providers.gcp:GCPNodeProvider",
    "kubernetes": "rayfield.autoscaler.providers.kubernetes:KubernetesNodeProvider",
}


def provider_class(provider_config: dict[str, Any]) -> type[NodeProvider]:
    """The class of the provider ``provider_config`` names: a built-in type, or for
    ``type: external`` the class at the dotted path ``module``
    (``package.module.ClassName``).

    Raises:
        ProviderError: the type is unknown, or the external class cannot be imported or
            is not a ``NodeProvider`` subclass.
    """
    kind = provider_config.get("type")
    if kind == "external":
        path = str(provider_config.get("module") or "")
        module_name, _, attr = path.rpartition(".")
        where = "provider.module"
    elif kind in _BUILT_IN:
        module_name, _, attr = _BUILT_IN[str(kind)].partition(":")
        where = f"provider type {kind!r}"
    else:
        known = ", ".join(repr(k) for k in [*_BUILT_IN, "external"])
        raise ProviderError(f"provider type {kind!r} is not available; use one of {known}")
    if not module_name or not attr:
        raise ProviderError(
            f"provider.module {path!r} is not a dotted path to a class: write it as "
            "'package.module.ProviderClass'"
        )
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise ProviderError(f"{where}: cannot import {module_name!r} ({exc})") from None
    except AttributeError:
        raise ProviderError(f"{where}: module {module_name!r} has no {attr!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, NodeProvider)):
        raise ProviderError(
            f"{where}: {module_name}.{attr} is not a subclass of "
            "rayfield.autoscaler.node_provider.NodeProvider"
        )
    return cls


def get_node_provider(provider_config: dict[str, Any], cluster_name: str) -> NodeProvider:
    """The provider for ``provider_config["type"]`` (see :func:`provider_class`).

    Raises:
        ProviderError: the type is not one this version provides, the external class
            cannot be used, or the provider refuses its config.
    """
    kind = provider_config.get("type")
    if kind == "local":
        from rayfield.autoscaler.local import LocalNodeProvider

        return LocalNodeProvider(provider_config, cluster_name)
    if kind == "local_process":
        from rayfield.autoscaler.local_process import LocalProcessProvider

        return LocalProcessProvider(provider_config, cluster_name)
    return provider_class(provider_config)(provider_config, cluster_name)
