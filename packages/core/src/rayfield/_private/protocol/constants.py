"""Sizes and units of the wire format, defined once for the GCS and node messages."""

from __future__ import annotations

__all__ = ["ID_SIZE", "MAX_MESSAGE_BYTES", "RESOURCE_UNIT"]

ID_SIZE = 20
"""Bytes of a UniqueID (object, task, actor, job and node ids) on the wire."""

RESOURCE_UNIT = 10000
"""Resource amounts travel as integers in units of 1/RESOURCE_UNIT (``ResourceAmount``),
the fixed point of the native scheduler."""

MAX_MESSAGE_BYTES = 64 << 20
"""Largest gRPC message a GCS or node call sends or accepts, in bytes (64 MiB)."""
