"""Utilities on top of the core API: actor pools, a distributed queue, ``multiprocessing.Pool``,
a joblib backend, and ``get_node_ip_address``.

Public modules for tools and libraries: ``rayfield.util.state`` (the cluster's state),
``rayfield.util.cluster`` (finding, starting and stopping a cluster), ``rayfield.util.perf``
(the microbenchmark).

``rayfield.util.multiprocessing`` and ``rayfield.util.joblib`` are imported on first use, so
``import rayfield.util`` never imports joblib.

Example:
    from rayfield.util import ActorPool, Queue
    from rayfield.util.multiprocessing import Pool
"""

from __future__ import annotations

import importlib
from typing import Any

from rayfield.util.actor_pool import ActorPool
from rayfield.util.network import get_node_ip_address
from rayfield.util.queue import Empty, Full, Queue

__all__ = [
    "ActorPool",
    "Empty",
    "Full",
    "Queue",
    "get_node_ip_address",
    "joblib",
    "multiprocessing",
]

_LAZY_SUBMODULES = ("joblib", "multiprocessing")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
