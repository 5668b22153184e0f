"""Numbers that several layers must agree on, defined once."""

from __future__ import annotations

__all__ = ["MAX_MESSAGE_BYTES", "RESOURCE_UNIT"]

RESOURCE_UNIT = 10000
"""Resource amounts travel as integers in units of 1/RESOURCE_UNIT (0.0001 of a CPU, GPU
or custom resource): ``round(amount * RESOURCE_UNIT)``."""

MAX_MESSAGE_BYTES = 64 << 20
"""The largest gRPC message (bytes) the GCS, the node service and their clients send or
accept; larger objects travel in chunks."""
