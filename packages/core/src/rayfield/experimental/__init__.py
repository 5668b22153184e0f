"""Experimental APIs: ``signal`` and ``async_api`` (of the reference) and ``internal_kv``
(the cluster's key-value store, as Ray's ``ray.experimental.internal_kv``).

Each submodule is imported on first use (``async_api`` brings asyncio, which a driver
that only reads ``internal_kv`` does not need)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.experimental import async_api, internal_kv, signal

__all__ = ["async_api", "internal_kv", "signal"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
