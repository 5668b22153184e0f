"""When a node that cannot reach the GCS gives up and shuts down.

A node keeps working while the GCS is down (being restarted): see ``agent.py``. A GCS
that never comes back, though, would leave the node, its workers and its actors running
forever, holding the machine's memory and cores for a cluster that no longer exists. So
a node that has not reached the GCS for ``gcs_reconnect_timeout_s`` seconds (default 60,
as Ray's ``gcs_rpc_server_reconnect_timeout_s``) shuts down: the node process logs why,
stops its workers (and so its actors), and exits.

:class:`GcsReach` makes that decision from the heartbeat rounds' outcomes alone (pure:
the caller gives it the time), so it is tested without a GCS. The time counts from the
last round that reached the GCS (from the node's start when none did yet), so a node
gives up ``timeout_s`` after the GCS last answered however long its failed calls take.

Settings: ``rayfield start --gcs-reconnect-timeout-s`` (env
``RAYFIELD_GCS_RECONNECT_TIMEOUT_S``); ``0`` or less: never give up.
"""

from __future__ import annotations

import enum
import math
import os

__all__ = [
    "DEFAULT_GCS_RECONNECT_TIMEOUT_S",
    "ENV_GCS_RECONNECT_TIMEOUT_S",
    "GcsReach",
    "Reach",
    "reconnect_timeout_from_env",
]

DEFAULT_GCS_RECONNECT_TIMEOUT_S = 60.0
ENV_GCS_RECONNECT_TIMEOUT_S = "RAYFIELD_GCS_RECONNECT_TIMEOUT_S"


class Reach(enum.Enum):
    """What a heartbeat round's outcome means for the node."""

    UP = "up"  # the GCS answered, as in the round before
    LOST = "lost"  # the first round that did not reach it after one that did
    WAITING = "waiting"  # still unreachable, within the timeout
    BACK = "back"  # it answered again after an outage
    GIVE_UP = "give up"  # unreachable for the timeout: shut the node down (said once)


class GcsReach:
    """Tracks whether the GCS answers; says when the node should give up on it.

    Args:
        timeout_s: seconds without reaching the GCS after which the node gives up;
            ``0`` or less (or infinity): never.
        now: the monotonic time the node started (seconds), the count's start until a
            round reaches the GCS.

    Raises:
        ValueError: ``timeout_s`` is NaN.
    """

    def __init__(self, timeout_s: float, now: float) -> None:
        if math.isnan(timeout_s):
            raise ValueError("gcs_reconnect_timeout_s is NaN: give a number of seconds")
        self.timeout_s = timeout_s if timeout_s > 0 else math.inf
        self.last_reached = now
        self.down = False
        self.gave_up = False

    def observe(self, reached: bool, now: float) -> Reach:
        """Take one round's outcome (``reached``: the GCS answered) at monotonic ``now``."""
        if reached:
            back, self.down = self.down, False
            self.last_reached = now
            return Reach.BACK if back else Reach.UP
        lost, self.down = not self.down, True
        if self.gave_up:
            return Reach.WAITING
        if now - self.last_reached >= self.timeout_s:
            self.gave_up = True
            return Reach.GIVE_UP
        return Reach.LOST if lost else Reach.WAITING

    def unreachable_s(self, now: float) -> float:
        """Seconds since the GCS last answered (since the start when it never did)."""
        return now - self.last_reached


def reconnect_timeout_from_env(default: float = DEFAULT_GCS_RECONNECT_TIMEOUT_S) -> float:
    """``RAYFIELD_GCS_RECONNECT_TIMEOUT_S`` as seconds, else ``default``.

    Raises:
        ValueError: the variable is set to something that is not a number.
    """
    raw = os.environ.get(ENV_GCS_RECONNECT_TIMEOUT_S, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"{ENV_GCS_RECONNECT_TIMEOUT_S}={raw!r} is not a number of seconds; e.g. 60, or 0 "
            "for a node that never gives up on the GCS"
        ) from None
    if math.isnan(value):
        raise ValueError(f"{ENV_GCS_RECONNECT_TIMEOUT_S} is NaN: give a number of seconds")
    return value
