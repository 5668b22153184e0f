"""Sizes and units several layers must agree on, defined once.

``ID_SIZE`` and ``RESOURCE_UNIT`` come from the native store (``common.h``), so the C++
scheduler, the wire format and the Python runtime cannot disagree.
"""

from __future__ import annotations

from rayfield.store import ID_SIZE, RESOURCE_UNIT

__all__ = ["ID_SIZE", "MAX_MESSAGE_BYTES", "RESOURCE_UNIT"]

MAX_MESSAGE_BYTES = 64 << 20
"""The largest gRPC message (bytes) the GCS, the node service and their clients send or
accept (64 MiB); larger objects travel in chunks."""
