"""Sending signals (``rayfield.experimental.signal``): the part a worker needs to send an
``ErrorSignal`` for a failed task or actor method without importing the public API.

Signals are objects in the store under ids derived from (source, index), pinned by the
sending process; a source is the id of the sending task or actor, and its signals are
numbered from 1 in the order this process sent them.
"""

from __future__ import annotations

import hashlib
import threading

from rayfield._private.runtime.runtime import get_runtime

__all__ = ["ErrorSignal", "Signal", "send_from", "signal_id"]

PUBLIC_MODULE = "rayfield.experimental.signal"


class Signal:
    """Base class of user signals: subclass it and add fields."""


class ErrorSignal(Signal):
    """Sent automatically when a task or actor method raises.

    Args:
        error: the exception the task or method raised.
    """

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def get_error(self) -> BaseException:
        """The exception the task or actor method raised."""
        return self.error


# Both classes are public as rayfield.experimental.signal.{Signal,ErrorSignal}.
Signal.__module__ = ErrorSignal.__module__ = PUBLIC_MODULE

_lock = threading.Lock()
_sent: dict[bytes, int] = {}


def signal_id(source: bytes, index: int) -> bytes:
    """The store id of signal number ``index`` (from 1) sent by ``source``."""
    return hashlib.sha1(b"rayfield-signal:" + source + index.to_bytes(8, "little")).digest()


def send_from(source: bytes, signal: Signal) -> None:
    """Store ``signal`` as the next signal of ``source`` and pin it while this process
    lives.

    Raises:
        RayfieldError: rayfield is not initialized.
    """
    rt = get_runtime()
    with _lock:
        index = _sent.get(source, 0) + 1
        _sent[source] = index
    sid = signal_id(source, index)
    rt.client.pin([sid])  # kept while this process lives
    rt.store_value(sid, signal)
