"""Experimental APIs: ``signal`` and ``async_api`` (of the reference) and ``internal_kv``
(the cluster's key-value store, as Ray's ``ray.experimental.internal_kv``)."""

from __future__ import annotations

from rayfield.experimental import async_api, internal_kv, signal

__all__ = ["async_api", "internal_kv", "signal"]
