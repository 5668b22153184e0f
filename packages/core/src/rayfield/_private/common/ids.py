"""The layout of the 20-byte ids of objects, tasks, actors and jobs.

An id made by a process is::

    bytes 0-5    origin: the first 6 bytes of the id of the node whose process made it
    bytes 6-11   6 random bytes per process (bytes 0-11: the process's prefix, a
                 driver's job id)
    bytes 12-15  a per-process counter (little-endian), one per task or put
    bytes 16-19  the index: 0 for a task id, i + 1 for its i-th return,
                 0xFFFFFFFF for a put

so any node tells which node owns an object from its first bytes (:func:`origin_of`) and
the task that returns an object from its first 16 (:func:`task_of`). Exported code has
ids of its own (``code.CODE_ORIGIN`` in place of an origin). Logs show ids shortened by
:func:`short`.
"""

from __future__ import annotations

import itertools
import os
import struct

from rayfield._private.protocol.constants import ID_SIZE

__all__ = [
    "ID_SIZE",
    "JOB_ID_BYTES",
    "ORIGIN_BYTES",
    "SHORT_HEX",
    "TASK_ID_BYTES",
    "IdGenerator",
    "origin_of",
    "return_id",
    "short",
    "task_of",
]

ORIGIN_BYTES = 6
"""Ids start with this many bytes of the id of the node where they were made."""
JOB_ID_BYTES = 12
"""The prefix every id a process makes shares: the process's (a driver's job) id."""
TASK_ID_BYTES = 16
"""The part of an object id naming the task that returns it (prefix and counter)."""
SHORT_HEX = 16
"""Hex digits of an id in log messages (its first 8 bytes)."""
_PUT_INDEX = 0xFFFFFFFF


def origin_of(object_id: bytes) -> bytes:
    """The node-id prefix of the node whose process made ``object_id`` (a put, or the
    task whose return it is): the node that owns it."""
    return object_id[:ORIGIN_BYTES]


def task_of(object_id: bytes) -> bytes:
    """The id of the task that returns ``object_id`` (its first 16 bytes, index 0)."""
    return object_id[:TASK_ID_BYTES] + bytes(ID_SIZE - TASK_ID_BYTES)


def return_id(task_id: bytes, index: int) -> bytes:
    """The id of return number ``index`` (from 0) of the task ``task_id``."""
    return task_id[:TASK_ID_BYTES] + struct.pack("<I", index + 1)


def short(any_id: bytes) -> str:
    """``any_id`` as the first 16 hex digits, for log messages."""
    return any_id.hex()[:SHORT_HEX]


class IdGenerator:
    """Unique ids of one process: its node's origin, 6 random bytes, a counter and an
    index (the layout above).

    Args:
        node_id: the id of the process's node; without one (local mode) the origin is
            random.
    """

    def __init__(self, node_id: bytes = b"") -> None:
        origin = origin_of(node_id) if len(node_id) >= ORIGIN_BYTES else os.urandom(ORIGIN_BYTES)
        self._prefix = origin + os.urandom(JOB_ID_BYTES - ORIGIN_BYTES)
        # next() of an itertools.count is one C call: atomic under the GIL, so threads
        # submitting at once never share a number (no lock on the submit path).
        self._next = itertools.count(1).__next__

    @property
    def job_id(self) -> bytes:
        """The 12-byte prefix of this process's ids (a driver's job id)."""
        return self._prefix

    def task_id(self) -> bytes:
        """A new task id (index 0)."""
        return self._prefix + struct.pack("<II", self._next(), 0)

    return_id = staticmethod(return_id)
    """The id of return number ``index`` of ``task_id`` (the module's :func:`return_id`)."""

    def put_id(self) -> bytes:
        """A new id for an object made by ``put``."""
        return self._prefix + struct.pack("<II", self._next(), _PUT_INDEX)
