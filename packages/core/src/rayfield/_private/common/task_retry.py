"""Retries of tasks that raise: the ``retry_exceptions`` option (Ray's name).

``@remote(max_retries=N, retry_exceptions=...)`` runs a task again when it raises an
exception the option allows, sharing the ``max_retries`` budget with the retries after
a worker death (the node counts both). ``True`` allows every ``Exception``; a list or
tuple of exception classes allows instances of those; ``False`` (the default) none.
``KeyboardInterrupt`` (a cancelled task) and other ``BaseException``s that are not
``Exception``s are never retried, nor are errors of a task's arguments (the task that
made them already failed).

The worker decides: when the task raised an allowed exception and its dispatch says the
node may still run it again (``retries_left != 0``), it stores no result and reports
the task done with ``retry=True``; the node submits it again. The last run's error is
stored as usual, so ``get`` raises it.
"""

from __future__ import annotations

import functools
from typing import Any

import cloudpickle

__all__ = ["RetryExceptions", "allows", "check", "pack", "unpack"]

RetryExceptions = bool | tuple[type[BaseException], ...]


def check(value: Any) -> RetryExceptions:
    """Validate a ``retry_exceptions`` option.

    Args:
        value: ``True``, ``False``, or a list or tuple of exception classes (empty:
            none is retried, as ``False``); None means the default, False.

    Returns:
        The bool, or the classes as a tuple.

    Raises:
        TypeError: anything else (the message says what is accepted).
    """
    if value is None:  # as Ray's options: None is the default
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)) and all(
        isinstance(c, type) and issubclass(c, BaseException) for c in value
    ):
        return tuple(value)
    raise TypeError(
        "retry_exceptions must be True, False, or a list of exception classes (e.g. "
        f"[ValueError, MyError]), got {value!r}"
    )


def allows(exc: BaseException, retry_exceptions: RetryExceptions) -> bool:
    """Whether ``exc``, raised by a task, may make it run again.

    Args:
        exc: what the task raised.
        retry_exceptions: the checked option (see :func:`check`).
    """
    if not isinstance(exc, Exception) or retry_exceptions is False:
        return False
    return retry_exceptions is True or isinstance(exc, retry_exceptions)


@functools.lru_cache(maxsize=256)
def pack(retry_exceptions: tuple[type[BaseException], ...]) -> bytes:
    """The classes as bytes for the task's payload (cloudpickle: classes of ``__main__``
    travel by value)."""
    return bytes(cloudpickle.dumps(retry_exceptions))


@functools.lru_cache(maxsize=256)
def unpack(option: bool | bytes) -> RetryExceptions:
    """The option as the worker reads it from the payload (a bool, or :func:`pack`'s bytes)."""
    if isinstance(option, bytes):
        classes: tuple[type[BaseException], ...] = cloudpickle.loads(option)
        return classes
    return bool(option)
