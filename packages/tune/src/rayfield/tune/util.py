"""Classic module name ``ray.tune.util``: pinning large objects in the object store."""

from __future__ import annotations

from rayfield.tune.utils import get_pinned_object, pin_in_object_store

__all__ = ["get_pinned_object", "pin_in_object_store"]
