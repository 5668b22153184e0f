"""In-process publish/subscribe of the GCS server.

Each Subscribe stream owns a ``Subscription``: a bounded queue that ``publish``
fills without blocking. A subscriber that falls ``queue_size`` messages behind
is closed (its stream ends; the subscriber may subscribe again), so one slow
reader never holds up the GCS. Messages published while a client is not
subscribed (e.g. during a GCS restart) are not replayed. Nodes subscribe to
``NODE_ALIVE`` (``node_manager/node_watch.py``) to hear of nodes that join at once;
tools that watch the cluster may subscribe too.
"""

from __future__ import annotations

import queue
import threading

from rayfield._private.protocol.errors import GcsError
from rayfield._private.protocol.types import GcsMessage

__all__ = ["GcsTooManySubscribersError", "PubSub", "Subscription"]


class GcsTooManySubscribersError(GcsError):
    """The GCS serves its maximum number of Subscribe streams."""

    status = "RESOURCE_EXHAUSTED"


_CLOSED = GcsMessage("", b"", b"")


class Subscription:
    """The queue of one subscriber; ``channels`` empty means every channel."""

    def __init__(self, channels: frozenset[str], queue_size: int) -> None:
        self.channels = channels
        self._queue: queue.Queue[GcsMessage] = queue.Queue(maxsize=queue_size)
        self.closed = False

    def wants(self, channel: str) -> bool:
        return not self.channels or channel in self.channels

    def put(self, message: GcsMessage) -> None:
        """Queue ``message``; close the subscription when it is full."""
        if self.closed:
            return
        try:
            self._queue.put_nowait(message)
        except queue.Full:
            self.close()

    def get(self, timeout_s: float) -> GcsMessage | None:
        """The next message, None after ``timeout_s`` without one or once closed."""
        try:
            message = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        return None if message is _CLOSED else message

    def close(self) -> None:
        """Wake the reader and make it stop."""
        self.closed = True
        while True:
            try:
                self._queue.put_nowait(_CLOSED)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    pass


class PubSub:
    """Fan-out of published messages to the subscriptions that want their channel.

    Args:
        max_subscribers: Subscribe streams served at once (each holds a server thread).
        queue_size: messages a subscriber may fall behind before it is dropped.
    """

    def __init__(self, max_subscribers: int = 16, queue_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._subs: set[Subscription] = set()
        self._max = max_subscribers
        self._queue_size = queue_size

    def subscribe(self, channels: list[str]) -> Subscription:
        """A new subscription to ``channels`` (empty: all).

        Raises:
            GcsTooManySubscribersError: when ``max_subscribers`` streams are open.
        """
        with self._lock:
            if len(self._subs) >= self._max:
                raise GcsTooManySubscribersError(
                    f"the GCS already serves {self._max} subscribers: close unused "
                    "subscriptions or start the GCS with a larger --max-subscribers"
                )
            sub = Subscription(frozenset(channels), self._queue_size)
            self._subs.add(sub)
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.discard(sub)
        sub.close()

    def publish(self, channel: str, key: bytes, payload: bytes) -> None:
        """Queue a message for every subscription that wants ``channel``."""
        message = GcsMessage(channel, key, payload)
        with self._lock:
            subs = [s for s in self._subs if s.wants(channel)]
        for sub in subs:
            sub.put(message)

    def close_all(self) -> None:
        """End every subscription (server shutdown)."""
        with self._lock:
            subs, self._subs = list(self._subs), set()
        for sub in subs:
            sub.close()
