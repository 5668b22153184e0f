"""Utilities on top of the core API: placement groups (``placement_group`` and the
functions beside it, ``rayfield.util.placement_group``), actor pools, a distributed
queue, ``multiprocessing.Pool``, a joblib backend, ``get_node_ip_address``,
``list_named_actors``, and ``inspect_serializability`` (which pieces of a value cannot be
sent to a task).

``rayfield.util.metrics``: application metrics (``Counter``, ``Gauge``, ``Histogram``).
Public modules for tools and libraries: ``rayfield.util.state`` (the cluster's state),
``rayfield.util.cluster`` (finding, starting and stopping a cluster), ``rayfield.util.perf``
(the microbenchmark), ``rayfield.util.private_files`` (owner-only files, as every package
keeps them).

Every name here is imported on first use: ``import rayfield.util`` loads neither the
runtime nor joblib.

Example:
    from rayfield.util import ActorPool, Queue
    from rayfield.util.multiprocessing import Pool
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.util.actor_pool import ActorPool
    from rayfield.util.check_serialize import FailureTuple, inspect_serializability
    from rayfield.util.named_actors import list_named_actors
    from rayfield.util.network import get_node_ip_address
    from rayfield.util.placement_group import (
        PlacementGroup,
        get_current_placement_group,
        get_placement_group,
        placement_group,
        placement_group_table,
        remove_placement_group,
    )
    from rayfield.util.queue import Empty, Full, Queue

__all__ = [
    "ActorPool",
    "Empty",
    "FailureTuple",
    "Full",
    "PlacementGroup",
    "Queue",
    "get_current_placement_group",
    "get_node_ip_address",
    "get_placement_group",
    "inspect_serializability",
    "joblib",
    "list_named_actors",
    "metrics",
    "multiprocessing",
    "placement_group",
    "placement_group_table",
    "private_files",
    "remove_placement_group",
]

# Each name is imported from its module on first use (PEP 562), so `from rayfield.util
# import cluster` (the `rayfield` command) does not load the runtime.
_NAMES = {
    "ActorPool": "rayfield.util.actor_pool",
    "Empty": "rayfield.util.queue",
    "FailureTuple": "rayfield.util.check_serialize",
    "Full": "rayfield.util.queue",
    "Queue": "rayfield.util.queue",
    "get_node_ip_address": "rayfield.util.network",
    "inspect_serializability": "rayfield.util.check_serialize",
    "list_named_actors": "rayfield.util.named_actors",
    "PlacementGroup": "rayfield.util.placement_group",
    "get_current_placement_group": "rayfield.util.placement_group",
    "get_placement_group": "rayfield.util.placement_group",
    "placement_group": "rayfield.util.placement_group",
    "placement_group_table": "rayfield.util.placement_group",
    "remove_placement_group": "rayfield.util.placement_group",
}
_LAZY_SUBMODULES = (
    "actor_pool",
    "joblib",
    "metrics",
    "multiprocessing",
    "network",
    "private_files",
    "queue",
)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        module = importlib.import_module(_NAMES[name])
        if module.__name__ == f"{__name__}.placement_group":
            # Importing the submodule made `placement_group` here the module: the name is
            # the function, as in Ray (the module is callable too, for other import orders).
            globals()["placement_group"] = module.placement_group
        value = getattr(module, name)
        globals()[name] = value
        return value
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
