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
from typing import TYPE_CHECKING, Any

__path__ = extend_path(__path__, __name__)

if TYPE_CHECKING:
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

# The module of each public name. A name is imported on first use (PEP 562), so that
# `import rayfield.util.cluster` or the `rayfield` command (`rayfield.cli`), which
# import this package first, do not load the runtime, cloudpickle and asyncio.
_PUBLIC = {
    name: module
    for module, names in (
        ("rayfield.exceptions", "exceptions"),
        ("rayfield._private.runtime.object_ref", "ObjectID ObjectRef"),
        ("rayfield.actor", "ActorClass ActorHandle method"),
        (
            "rayfield.api",
            "cancel get get_actor get_gpu_ids get_resource_ids init is_initialized kill put "
            "register_custom_serializer remote shutdown wait",
        ),
        ("rayfield.runtime_context", "get_runtime_context"),
        (
            "rayfield.state",
            "actors available_resources cluster_resources nodes objects profile tasks timeline",
        ),
    )
    for name in names.split()
}

# Submodules that are attributes of this package (imported on first use), as Ray's
# ``ray.util`` is; some of them importing this package used to load as well.
_SUBMODULES = frozenset(
    ("_private", "actor", "api", "remote_function", "runtime_context", "state", "store", "util")
)

# The libraries that come as separate distributions, and where to get them.
_LIBRARIES = {name: f"rayfield-{name}" for name in ("tune", "rllib", "sgd", "autoscaler", "cli")}


def __getattr__(name: str) -> Any:
    """A public name (imported from its module on first use; kept here after), or
    ``rayfield.tune`` and friends: the library, or how to install it."""
    import importlib

    if name in _PUBLIC:
        module = importlib.import_module(_PUBLIC[name])
        value = module if module.__name__ == f"rayfield.{name}" else getattr(module, name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"rayfield.{name}")
    if name in _LIBRARIES:
        try:
            return importlib.import_module(f"rayfield.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rayfield.{name}":
                raise
            raise ImportError(
                f"rayfield.{name} is not installed: pip install {_LIBRARIES[name]}"
            ) from None
    raise AttributeError(f"module 'rayfield' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
