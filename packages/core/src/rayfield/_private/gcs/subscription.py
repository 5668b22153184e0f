"""``GcsSubscription``: a Subscribe stream that survives GCS restarts.

A background thread reads the stream into a queue. When the stream breaks
(GCS stopped or killed), the thread subscribes again with backoff until
``retry_deadline_s`` has passed since the break; messages published meanwhile
are lost. Messages of the built-in channels carry their decoded record in
``GcsMessage.value`` (NodeInfo for NODE_ALIVE/NODE_DEAD, ActorInfo for ACTOR).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Any

import grpc

from rayfield._private.gcs import codec
from rayfield._private.gcs.errors import GcsError, GcsUnavailableError
from rayfield._private.gcs.types import (
    CHANNEL_ACTOR,
    CHANNEL_NODE_ALIVE,
    CHANNEL_NODE_DEAD,
    GcsMessage,
)

if TYPE_CHECKING:
    from rayfield._private.gcs.client import GcsClient

__all__ = ["GcsSubscription"]

_RECORD_OF_CHANNEL = {
    CHANNEL_NODE_ALIVE: "GcsNodeInfo",
    CHANNEL_NODE_DEAD: "GcsNodeInfo",
    CHANNEL_ACTOR: "GcsActorInfo",
}


def _message(raw: bytes) -> GcsMessage:
    fields = codec.decode("GcsPubSubMessage", raw)
    message = GcsMessage(fields["channel"], fields["key"], fields["payload"])
    table = _RECORD_OF_CHANNEL.get(message.channel)
    if table is not None:
        message.value = codec.decode_record(table, message.payload)
    return message


class GcsSubscription:
    """Iterator of the messages of some channels; see ``GcsClient.subscribe``.

    Raises (from the constructor, iteration and ``get``):
        GcsUnavailableError: when the GCS cannot be reached for ``retry_deadline_s``.
        GcsAuthError: when the token is refused.
    """

    def __init__(self, client: GcsClient, channels: list[str]) -> None:
        self._client = client
        self._payload = codec.encode("GcsSubscribeRequest", {"channels": channels})
        self._queue: queue.Queue[GcsMessage | GcsError] = queue.Queue()
        self._ready = threading.Event()
        self._closed = False
        self._call: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gcs-subscribe", daemon=True)
        self._thread.start()
        while not self._ready.wait(0.05):
            if not self._thread.is_alive():
                self.close()
                error = self._queue.get_nowait()
                assert isinstance(error, GcsError)
                raise error

    def _open(self) -> Any:
        stub = self._client._stubs["Subscribe"]
        with self._lock:
            if self._closed:
                return None
            self._call = stub(self._payload, metadata=self._client.metadata)
            return self._call

    def _run(self) -> None:
        broken_since = time.monotonic()
        delay = 0.05
        while not self._closed:
            failure: grpc.RpcError | None = None
            try:
                call = self._open()
                if call is None:
                    return
                for raw in call:
                    message = _message(raw)
                    if not message.channel:  # subscription confirmed
                        self._ready.set()
                        broken_since, delay = time.monotonic(), 0.05
                        continue
                    self._queue.put(message)
            except grpc.RpcError as exc:
                failure = exc
            except GcsError as exc:
                self._queue.put(exc)
                return
            if self._closed:
                return
            code = failure.code() if failure is not None else grpc.StatusCode.UNAVAILABLE
            if code != grpc.StatusCode.UNAVAILABLE and failure is not None:
                self._queue.put(self._client.error("Subscribe", failure))
                return
            if self._ready.is_set():
                self._ready.clear()
                broken_since = time.monotonic()
            if time.monotonic() + delay > broken_since + self._client.retry_deadline_s:
                self._queue.put(
                    GcsUnavailableError(
                        f"lost the subscription to the GCS at {self._client.address} for "
                        f"{self._client.retry_deadline_s:g} s: check that the GCS runs"
                    )
                )
                return
            time.sleep(delay)
            delay = min(2 * delay, 1.0)

    def get(self, timeout_s: float | None = None) -> GcsMessage | None:
        """The next message; None after ``timeout_s`` seconds without one (None: wait)."""
        try:
            item = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(item, GcsError):
            raise item
        return item

    def __iter__(self) -> GcsSubscription:
        return self

    def __next__(self) -> GcsMessage:
        if self._closed and self._queue.empty():
            raise StopIteration
        message = self.get()
        assert message is not None
        return message

    def close(self) -> None:
        """Cancel the stream and stop the reader thread."""
        with self._lock:
            self._closed = True
            if self._call is not None:
                self._call.cancel()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> GcsSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
