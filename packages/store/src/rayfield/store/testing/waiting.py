"""``wait_for``: the one polling helper of every rayfield package's tests (rayfield-core's
``rayfield.testing.wait_for`` is this function)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["wait_for"]

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    message: str | None = None,
    *,
    interval: float = 0.02,
) -> T:
    """Call ``predicate`` until it returns a true value, and return that value.

    Ray's ``wait_for_condition``. Use it to wait for state a test can observe (a node
    registered, a file written, a counter reached) instead of sleeping for a guessed time.

    Args:
        predicate: called with no arguments, repeatedly, from this thread.
        timeout: seconds to keep trying (> 0).
        message: what is awaited, for the error (default: the predicate's name).
        interval: seconds between two calls (>= 0).

    Returns:
        The first true value ``predicate`` returned.

    Raises:
        TypeError: ``predicate`` is not callable.
        ValueError: ``timeout`` is not positive or ``interval`` is negative.
        TimeoutError: ``predicate`` returned no true value within ``timeout`` seconds; the
            message names what was awaited and the last value (or exception) seen.
        Exception: whatever ``predicate`` raises on its last call, chained to the
            TimeoutError (earlier exceptions count as "not yet").
    """
    if not callable(predicate):
        raise TypeError(f"wait_for needs a callable predicate, got {type(predicate).__name__}")
    if not timeout > 0:
        raise ValueError(f"wait_for: timeout must be > 0 seconds, got {timeout!r}")
    if interval < 0:
        raise ValueError(f"wait_for: interval must be >= 0 seconds, got {interval!r}")
    what = message or getattr(predicate, "__name__", repr(predicate))
    deadline = time.monotonic() + timeout
    last: Any = None
    error: BaseException | None = None
    while True:
        try:
            last, error = predicate(), None
        except Exception as exc:
            last, error = None, exc
        if last:
            return last
        if time.monotonic() >= deadline:
            seen = f"last error: {error!r}" if error is not None else f"last value: {last!r}"
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what} ({seen})") from (
                error
            )
        time.sleep(interval)
