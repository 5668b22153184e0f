"""``rayfield.cancel`` of a task the caller's node forwarded to another node.

Runs in the driver or worker that called ``rayfield.cancel``: it asks its node's agent
(``CancelTask`` of the node service), which cancels the task where it was forwarded.
"""

from __future__ import annotations

import logging

from rayfield._private.transport import RpcError

logger = logging.getLogger("rayfield")

__all__ = ["cancel_elsewhere"]


def cancel_elsewhere(node_id: bytes, task_id: bytes, force: bool, recursive: bool = True) -> str:
    """``rayfield.cancel`` of a task this process's node no longer holds: ask that node's
    agent, which cancels it on the node it was forwarded to.

    Args:
        node_id: this process's node (where the task was submitted).
        recursive: also cancel the tasks it submitted.

    Returns:
        What the node running it answered (see ``Lifecycle.cancel``); ``"done"`` outside a
        cluster or when the node cannot be asked.
    """
    from rayfield._private.context import gcs_address, sessions_root
    from rayfield._private.driver.state_client import StateClient, StateError

    address = gcs_address()
    if not address:
        return "done"
    try:
        with StateClient(address, temp_dir=sessions_root()) as client:
            node = next((n for n in client.gcs.get_nodes() if n.node_id == node_id), None)
            if node is None or not node.alive:
                return "done"
            return client.node(node.address).cancel_task(task_id, force, recursive=recursive)
    except (StateError, RpcError) as exc:
        logger.warning("could not cancel task %s in the cluster: %s", task_id.hex()[:16], exc)
        return "done"
