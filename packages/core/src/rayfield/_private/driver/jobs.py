"""Jobs in the GCS: every driver connected to a cluster is one.

``init(address=...)`` records a job (``start``): its id is the driver's id prefix (the
first 12 bytes of every task and object id the driver makes, and
``get_runtime_context().get_job_id()``), with the driver's pid, node and command line.
``shutdown()`` marks it finished (``finish``); so does the driver's node when the
driver's connection drops without one (the process was killed: the node manager's
``jobs.finish_on_node``).
``rayfield list jobs`` and ``rayfield.util.state.list_jobs`` show them.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

__all__ = ["finish", "start"]

logger = logging.getLogger("rayfield")


def start(address: str, job_id: bytes, node_id: bytes) -> None:
    """Record the calling driver as a running job of the cluster at ``address``; a GCS
    that does not answer is logged, not raised (the job runs without its record)."""
    from rayfield._private.driver.names import client

    entrypoint = " ".join([Path(sys.argv[0]).name if sys.argv else "python", *sys.argv[1:]])
    try:
        client(address).add_job(job_id, os.getpid(), node_id, entrypoint[:1000])
    except Exception as exc:
        logger.warning("could not record this job in the GCS at %s: %s", address, exc)


def finish(address: str, job_id: bytes, temp_dir: str | None = None) -> None:
    """Mark the job finished; waits at most about 2 s for the GCS (this runs at exit).
    ``temp_dir``: where the driver found its cluster's sessions (``init(temp_dir=...)``;
    the token is looked for there), since the process context is gone by now."""
    from rayfield._private.driver.launch import find_token
    from rayfield._private.gcs.client import GcsClient

    try:
        token = find_token(address, Path(temp_dir) if temp_dir else None)
        with GcsClient(address, token, timeout_s=2, retry_deadline_s=1) as gcs:
            gcs.mark_job_finished(job_id)
    except Exception as exc:
        logger.debug("could not mark job %s finished: %s", job_id.hex(), exc)
