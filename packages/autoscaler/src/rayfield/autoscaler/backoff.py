"""Backoff of node types whose launches fail: a pure object, the time passed in.

After the n-th failed launch in a row of a node type, no node of that type is launched
for ``min(base_s * 2 ** (n - 1), max_s)`` seconds; a successful launch resets the count.
The autoscaler passes :meth:`LaunchBackoff.blocked` to ``ScalingPolicy.decide`` and logs
it, so a type that keeps failing is retried ever more rarely and reported, never
relaunched without bound.

Sources:
    Exponential backoff as in Ethernet's retransmission rule (R. M. Metcalfe and D. R.
    Boggs, "Ethernet: distributed packet switching for local computer networks", CACM
    19(7), 1976), capped.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LaunchBackoff"]


@dataclass
class _State:
    failures: int = 0
    until: float = 0.0
    last_error: str = ""


class LaunchBackoff:
    """Failed-launch backoff per node type.

    Args:
        base_s: seconds of the first backoff (> 0).
        max_s: the longest backoff, seconds (>= base_s).

    Raises:
        ValueError: the bounds are out of range.
    """

    def __init__(self, base_s: float = 5.0, max_s: float = 300.0) -> None:
        if base_s <= 0 or max_s < base_s:
            raise ValueError("need 0 < base_s <= max_s")
        self.base_s = base_s
        self.max_s = max_s
        self._types: dict[str, _State] = {}

    def failed(self, node_type: str, now: float, error: str = "") -> float:
        """Record a failed launch of ``node_type`` at ``now`` (seconds); returns the
        backoff it starts, in seconds."""
        st = self._types.setdefault(node_type, _State())
        st.failures += 1
        delay = min(self.base_s * 2 ** (st.failures - 1), self.max_s)
        st.until = now + delay
        st.last_error = error
        return delay

    def succeeded(self, node_type: str) -> None:
        """Record a successful launch: the type is no longer backed off."""
        self._types.pop(node_type, None)

    def blocked(self, now: float) -> dict[str, float]:
        """Node types not to launch at ``now``: type -> seconds of backoff left."""
        return {t: st.until - now for t, st in self._types.items() if st.until > now}

    def report(self) -> dict[str, tuple[int, str]]:
        """Every type with failures in a row: type -> (how many, the last error)."""
        return {t: (st.failures, st.last_error) for t, st in self._types.items()}
