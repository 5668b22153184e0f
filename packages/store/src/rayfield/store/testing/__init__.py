"""Test helpers for :mod:`rayfield.store`: a fake store, a conformance suite and local nodes.

* :class:`FakeObjectStore` and :class:`FakeStoreClient`: a pure-Python, in-process object
  store with the client API and semantics of the native one, for unit tests of code that
  uses a store (no sockets, no threads, no shared memory).
* :class:`ObjectStoreConformance`: the behaviour every store implementation must show,
  as a pytest class to subclass once per implementation.
* :func:`local_node` (the native node in this process) and :func:`node_process` (the native
  node in a child process, so a crash fails a test instead of killing the test run).
* :func:`wait_for`: poll until a condition a test can observe holds (every package's tests
  wait with it; rayfield-core re-exports it as ``rayfield.testing.wait_for``).

This module imports pytest. It imports nothing native at module level, so the fake and the
conformance suite work where the extension is not built.

Example:
    >>> import os
    >>> from rayfield.store.testing import FakeObjectStore
    >>> client = FakeObjectStore(capacity_bytes=1 << 20).connect()
    >>> oid = os.urandom(20)
    >>> client.put(oid, b"hello", metadata=b"RAW")
    >>> [buf] = client.get([oid], timeout_s=1.0)
    >>> bytes(buf), buf.metadata
    (b'hello', b'RAW')
"""

from __future__ import annotations

from rayfield.store.testing.conformance import ObjectStoreConformance
from rayfield.store.testing.fake import FakeObjectBuffer, FakeObjectStore, FakeStoreClient
from rayfield.store.testing.nodes import NodeProcess, local_node, node_process
from rayfield.store.testing.waiting import wait_for

__all__ = [
    "FakeObjectBuffer",
    "FakeObjectStore",
    "FakeStoreClient",
    "NodeProcess",
    "ObjectStoreConformance",
    "local_node",
    "node_process",
    "wait_for",
]
