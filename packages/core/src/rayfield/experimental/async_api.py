"""asyncio integration: ``await ref`` works directly; ``as_future(ref)`` is the classic form."""

from __future__ import annotations

import asyncio
from typing import Any

from rayfield._private.runtime.object_ref import ObjectRef

__all__ = ["as_future"]


def as_future(object_ref: ObjectRef[Any]) -> asyncio.Future[Any]:
    """An asyncio future for the value of `object_ref`, for ``asyncio.gather`` and friends.

    Raises:
        TypeError: not an ObjectRef.
    """
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"as_future() takes an ObjectRef, got {type(object_ref).__name__}")
    return asyncio.wrap_future(object_ref.future())
