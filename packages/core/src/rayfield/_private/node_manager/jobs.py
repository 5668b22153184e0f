"""The jobs of a node's drivers in the GCS, as the node sees them.

A driver that disconnects from its node without ``shutdown()`` (it was killed) leaves
its job marked running; the node marks it finished here. A driver that calls
``shutdown()`` closes its connection and then marks its job finished itself, so the node
may find it finished already: its tasks are still the node's to cancel.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["finish_on_node"]

logger = logging.getLogger("rayfield")


def finish_on_node(gcs: Any, node_id: bytes, driver_pid: int) -> list[bytes]:
    """The driver ``driver_pid`` of this node disconnected: mark its running jobs
    finished. Returns the jobs whose tasks must be cancelled: those it marked, and the
    driver's newest job even when already finished (its ``shutdown()`` can mark it
    before this node sees the connection close). Empty when the GCS does not answer."""
    ended: list[bytes] = []
    try:
        mine = [j for j in gcs.list_jobs() if j.node_id == node_id and j.driver_pid == driver_pid]
        newest = max(mine, key=lambda j: j.start_time_s, default=None)
        for job in mine:
            if not job.finished:
                gcs.mark_job_finished(job.job_id)
                ended.append(job.job_id)
            elif newest is not None and job is newest:
                ended.append(job.job_id)
    except Exception as exc:
        logger.debug("could not mark the jobs of driver %d finished: %s", driver_pid, exc)
    return ended
