"""What the code running in a worker may ask about itself (``get_runtime_context()``,
``get_resource_ids()``, ``get_gpu_ids()``).

The worker fills a :class:`TaskContext` before each task or actor call runs, on the thread
that runs it (threaded and async actors run calls on other threads, so it is a
``threading.local``).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["TaskContext"]


class TaskContext(threading.local):
    """The current task or actor call, as its worker sees it.

    Attributes:
        task_id: the running task's (or actor call's) 20-byte id.
        actor_id: the actor this worker hosts, or None.
        job_id: the 12-byte id of the driver whose work this is (its job).
        resource_ids: the instances the node gave it: ``{"CPU": [(index, fraction)],
            "GPU": [...]}`` (an actor call: those of its actor).
        resources: what it holds by amount, e.g. ``{"CPU": 1.0, "GPU": 0.5}``.
        actor_class: the class of the actor this worker hosts, or None.
        actor_restarted: the actor's constructor ran before, in a process that died.
        placement_group: the wire form of the group the task or actor runs in, or None;
            an actor's is also this class's default, so the threads it starts see it.
    """

    task_id: bytes | None = None
    actor_id: bytes | None = None
    job_id: bytes | None = None
    resource_ids: dict[str, list[tuple[int, float]]] = {}
    resources: dict[str, float] = {}
    actor_class: Any = None
    actor_restarted: bool = False
    placement_group: Any = None
