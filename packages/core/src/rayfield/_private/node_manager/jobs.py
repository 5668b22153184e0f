"""The jobs of a node's drivers in the GCS, as the node sees them.

A driver that disconnects from its node without ``shutdown()`` (it was killed) leaves
its job marked running; the node marks it finished here.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["finish_on_node"]

logger = logging.getLogger("rayfield")


def finish_on_node(gcs: Any, node_id: bytes, driver_pid: int) -> list[bytes]:
    """The driver ``driver_pid`` of this node disconnected: mark its
    running jobs finished; returns their ids (empty after a clean ``shutdown()``)."""
    ended = []
    try:
        for job in gcs.list_jobs():
            if job.node_id == node_id and job.driver_pid == driver_pid and not job.finished:
                gcs.mark_job_finished(job.job_id)
                ended.append(job.job_id)
    except Exception as exc:
        logger.debug("could not mark the jobs of driver %d finished: %s", driver_pid, exc)
    return ended
