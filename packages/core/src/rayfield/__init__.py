"""rayfield: distributed Python with the Ray API.

import rayfield as rf
rf.init()

@rf.remote
def square(x):
    return x * x

print(rf.get([square.remote(i) for i in range(4)]))  # [0, 1, 4, 9]
"""

from __future__ import annotations

# Other distributions (rayfield-store, rayfield-tune, ...) add subpackages of `rayfield`;
# this makes them importable also from editable installs in other folders.
from pkgutil import extend_path
from typing import Any

__path__ = extend_path(__path__, __name__)

import rayfield.exceptions as exceptions
from rayfield._private.runtime.object_ref import ObjectID, ObjectRef
from rayfield.actor import ActorClass, ActorHandle, method
from rayfield.api import (
    cancel,
    get,
    get_actor,
    get_gpu_ids,
    get_resource_ids,
    init,
    is_initialized,
    kill,
    put,
    register_custom_serializer,
    remote,
    shutdown,
    wait,
)
from rayfield.runtime_context import get_runtime_context
from rayfield.state import (
    actors,
    available_resources,
    cluster_resources,
    nodes,
    objects,
    profile,
    tasks,
    timeline,
)

__version__ = "0.1.0"

# The libraries that come as separate distributions, and where to get them.
_LIBRARIES = {name: f"rayfield-{name}" for name in ("tune", "rllib", "sgd", "autoscaler", "cli")}


def __getattr__(name: str) -> Any:
    """``rayfield.tune`` and friends: import the library, or say how to install it."""
    if name in _LIBRARIES:
        import importlib

        try:
            return importlib.import_module(f"rayfield.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rayfield.{name}":
                raise
            raise ImportError(
                f"rayfield.{name} is not installed: pip install {_LIBRARIES[name]}"
            ) from None
    raise AttributeError(f"module 'rayfield' has no attribute {name!r}")


__all__ = [
    "ActorClass",
    "ActorHandle",
    "ObjectID",
    "ObjectRef",
    "actors",
    "available_resources",
    "cancel",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_resource_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "objects",
    "profile",
    "put",
    "register_custom_serializer",
    "remote",
    "shutdown",
    "tasks",
    "timeline",
    "wait",
]
