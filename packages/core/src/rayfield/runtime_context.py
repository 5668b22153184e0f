"""``get_runtime_context()``: who and where the calling code is."""

from __future__ import annotations

import os
from typing import Any

from rayfield._private import runtime as _rt

__all__ = ["RuntimeContext", "get_runtime_context"]


class RuntimeContext:
    """The current job, node, worker, task and actor (ids as hex strings; None when not
    inside a task or an actor)."""

    def __init__(self) -> None:
        rt = _rt.get_runtime()
        local = rt.local
        self.job_id = rt.ids.job_id.hex() if not rt.is_worker else None
        self.node_id = rt.client.node_id.hex() if hasattr(rt, "client") else None
        self.worker_pid = os.getpid()
        self.is_worker = rt.is_worker
        task_id = getattr(local, "task_id", None)
        actor_id = getattr(local, "actor_id", None)
        self.task_id = task_id.hex() if task_id else None
        self.actor_id = actor_id.hex() if actor_id else None

    def get_task_id(self) -> str | None:
        return self.task_id

    def get_actor_id(self) -> str | None:
        return self.actor_id

    def get_node_id(self) -> str | None:
        return self.node_id

    def get(self) -> dict[str, Any]:
        return dict(vars(self))


def get_runtime_context() -> RuntimeContext:
    """Raises RayfieldError when rayfield is not initialized."""
    return RuntimeContext()
