"""Pure helpers of the state API's records: task events as the GCS keeps them, why an
object is held, the class a named actor's record names."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["decode_events", "payload_class", "pin_reason"]


def decode_events(blobs: list[bytes]) -> list[dict[str, Any]]:
    """Task events as the GCS keeps them (JSON objects), decoded; bad ones skipped."""
    out = []
    for blob in blobs:
        try:
            event = json.loads(blob)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def pin_reason(obj: dict[str, Any]) -> str:
    """Why a stored object is kept, in words (for ``rayfield memory``)."""
    if not obj["sealed"]:
        return "being written"
    if obj["spilled"]:
        return "spilled to disk"
    reasons = []
    if obj["pin_count"]:
        reasons.append("pinned (primary copy: a put or a task's return)")
    if obj["buffer_count"]:
        reasons.append(f"in use by {obj['buffer_count']} buffer(s)")
    return "; ".join(reasons) or "cached (evictable)"


def payload_class(payload: bytes) -> str:
    """The class name a named actor's GCS record carries (``names.py``), else "?"."""
    try:
        return str(json.loads(payload)["class_name"])
    except (ValueError, KeyError, TypeError):
        return "?"
