"""Utilities on top of the core API: actor pools, a distributed queue, ``multiprocessing.Pool``
and a joblib backend.

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
from rayfield.util.queue import Empty, Full, Queue

__all__ = ["ActorPool", "Empty", "Full", "Queue", "joblib", "multiprocessing"]

_LAZY_SUBMODULES = ("joblib", "multiprocessing")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
