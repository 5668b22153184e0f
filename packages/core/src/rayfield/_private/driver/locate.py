"""``wait(fetch_local=False)`` in a cluster: readiness from where objects are, no fetch.

A ref counts as ready once some alive node's store holds its object: this process's node
(asked with a wait that does not park, so that node starts no fetch) or another one (each
node's ``HasObjects``, through :class:`~.state_client.StateClient`). Nothing is copied to
this node. The state client (and grpc with it) is imported only here, when such a wait
runs, so workers start without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_anywhere"]

FIRST_POLL_S = 0.01  # the first pause between looks; it doubles up to MAX_POLL_S
MAX_POLL_S = 0.2


def wait_anywhere(
    here: Callable[[list[bytes]], list[bool]],
    ids: list[bytes],
    num_returns: int,
    timeout_s: float | None,
) -> list[bool]:
    """Which of ``ids`` are held by some node, once ``num_returns`` are or ``timeout_s``
    passed (None: no limit; 0: look once).

    Args:
        here: which of some ids this process's node holds, without fetching them.
        ids: the object ids.
        num_returns: how many must be ready.
        timeout_s: seconds to wait at most.

    Returns:
        One flag per id.
    """
    from rayfield._private.context import gcs_address, sessions_root
    from rayfield._private.driver.state_client import StateClient

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = FIRST_POLL_S
    with StateClient(gcs_address(), temp_dir=sessions_root()) as cluster:
        while True:
            flags = here(ids)
            missing = [i for i, found in enumerate(flags) if not found]
            if missing and sum(flags) < num_returns:
                elsewhere = cluster.present_anywhere([ids[i] for i in missing])
                for i, found in zip(missing, elsewhere, strict=True):
                    flags[i] = found
            left = None if deadline is None else deadline - time.monotonic()
            if sum(flags) >= num_returns or (left is not None and left <= 0):
                return flags
            time.sleep(pause if left is None else min(pause, left))
            pause = min(pause * 2, MAX_POLL_S)
