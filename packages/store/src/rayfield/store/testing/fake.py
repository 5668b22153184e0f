"""A pure-Python, in-process fake of the object store client (for unit tests)."""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from rayfield.store.errors import (
    InvalidRequestError,
    NotOwnerError,
    ObjectAlreadySealedError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StoreConnectionError,
    StoreFullError,
)

ID_SIZE = 20


def _check_id(object_id: Any) -> bytes:
    if not isinstance(object_id, bytes) or len(object_id) != ID_SIZE:
        n = len(object_id) if isinstance(object_id, (bytes, bytearray)) else type(object_id)
        raise InvalidRequestError(f"object ids are {ID_SIZE} bytes, got {n}")
    return object_id


class _Object:
    __slots__ = ("create_time_ms", "data", "doomed", "metadata", "owner", "refs", "sealed")

    def __init__(self, data_size: int, metadata: bytes, owner: int) -> None:
        self.data = bytearray(data_size)
        self.metadata = metadata
        self.owner = owner
        self.sealed = False
        self.doomed = False  # delete once the last reference goes
        self.refs: dict[int, int] = {owner: 1}  # client id -> references
        self.create_time_ms = int(time.time() * 1000)

    @property
    def nbytes(self) -> int:
        return len(self.data) + len(self.metadata)


class FakeObjectBuffer(bytes):
    """A read-only object as returned by :meth:`FakeStoreClient.get`; holds one reference.

    Pure-Python classes cannot export buffers before Python 3.12 (PEP 688), so this is a
    ``bytes`` subclass holding a copy of the sealed data: ``numpy.frombuffer`` and
    ``memoryview`` give read-only views of it, like the native ``ObjectBuffer``. Compare
    with ``bytes(buf)``; ``==`` is identity, as for the native type.
    """

    _object_id: bytes
    _metadata: bytes
    _client: FakeStoreClient
    _released: bool

    def __new__(cls, obj: _Object, object_id: bytes, client: FakeStoreClient) -> FakeObjectBuffer:
        self = super().__new__(cls, obj.data)
        self._object_id, self._metadata = object_id, obj.metadata
        self._client, self._released = client, False
        return self

    object_id = property(lambda self: self._object_id, doc="The object's 20-byte id.")
    metadata = property(lambda self: self._metadata, doc="The object's metadata bytes.")
    size = property(lambda self: len(self), doc="Size of the data in bytes.")

    def release(self) -> None:
        """Drop this buffer's reference now (later calls do nothing)."""
        if not self._released:
            self._released = True
            self._client._drop(self._object_id)

    def __del__(self) -> None:
        if not getattr(self, "_released", True):  # queued: finalizers may run inside the lock
            self._released = True
            self._client._store._pending.append((self._client.client_id, self._object_id))

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"FakeObjectBuffer({self._object_id.hex()}, size={len(self)})"


class FakeObjectStore:
    """An in-process object store with the native store's semantics and a byte counter.

    Thread-safe. Objects take ``data_size + len(metadata)`` bytes of ``capacity_bytes``;
    when a create does not fit, unreferenced sealed objects are evicted, least recently
    used first (an object is used when it is created, got, or its last reference goes).

    Args:
        capacity_bytes: bytes the objects may take in all (positive).

    Raises:
        InvalidRequestError: ``capacity_bytes`` is not positive.
    """

    def __init__(self, capacity_bytes: int = 64 << 20) -> None:
        if capacity_bytes <= 0:
            raise InvalidRequestError(f"capacity_bytes must be positive, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self.node_id = os.urandom(ID_SIZE)
        self._cond = threading.Condition(threading.RLock())
        self._objects: collections.OrderedDict[bytes, _Object] = collections.OrderedDict()
        self._used = self._evictions = self._evicted_bytes = 0
        self._clients: dict[int, FakeStoreClient] = {}
        self._client_ids = itertools.count(1)
        self._pending: collections.deque[tuple[int, bytes]] = collections.deque()

    def connect(self, kind: str = "driver", name: str = "") -> FakeStoreClient:
        """Open a new client of this store (the fake's ``StoreClient(socket_path)``)."""
        return FakeStoreClient(self, kind, name)

    def stats(self) -> dict[str, int]:
        """Capacity, bytes used, object count, evictions and client count."""
        with self._locked():
            return {
                "capacity_bytes": self.capacity_bytes,
                "used_bytes": self._used,
                "num_objects": len(self._objects),
                "num_evictions": self._evictions,
                "evicted_bytes": self._evicted_bytes,
                "num_clients": len(self._clients),
                "num_spilled": 0,  # the fake never spills
                "spilled_bytes": 0,
                "num_restored": 0,
            }

    def list_objects(self) -> list[dict[str, Any]]:
        """Every object with its id, sizes, state and reference count."""
        with self._locked():
            return [
                {
                    "object_id": oid,
                    "data_size": len(o.data),
                    "metadata_size": len(o.metadata),
                    "state": "sealed" if o.sealed else "created",
                    "ref_count": sum(o.refs.values()),
                    "create_time_ms": o.create_time_ms,
                }
                for oid, o in self._objects.items()
            ]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._cond:
            while self._pending:  # references of buffers collected since the last call
                client_id, oid = self._pending.popleft()
                self._drop_ref(oid, client_id)
            yield

    def _drop_ref(self, oid: bytes, client_id: int, count: int = 1) -> None:
        obj = self._objects.get(oid)
        if obj is None or client_id not in obj.refs:
            return
        obj.refs[client_id] -= count
        if obj.refs[client_id] <= 0:
            del obj.refs[client_id]
        if obj.doomed and not obj.refs:
            self._remove(oid)
        elif not obj.refs:  # most recently used: evicted last
            self._objects.move_to_end(oid)

    def _remove(self, oid: bytes, evicted: bool = False) -> None:
        obj = self._objects.pop(oid)
        self._used -= obj.nbytes
        if evicted:
            self._evictions += 1
            self._evicted_bytes += obj.nbytes
        if obj.sealed:
            kind = "evicted" if evicted else "deleted"
            self._notify((kind, oid, len(obj.data), len(obj.metadata)))

    def _notify(self, event: tuple[str, bytes, int, int]) -> None:
        for client in self._clients.values():
            if client._events is not None:
                client._events.append(event)
        self._cond.notify_all()

    def _reserve(self, nbytes: int) -> None:
        cap, used = self.capacity_bytes, self._used
        if nbytes > cap:
            msg = f"object of {nbytes} bytes is larger than the store ({cap} bytes)"
            raise ObjectTooLargeError(msg, nbytes, cap, used)
        evictable = [(k, o) for k, o in self._objects.items() if o.sealed and not o.refs]
        if used + nbytes > cap and used - sum(o.nbytes for _, o in evictable) + nbytes > cap:
            msg = f"no space for {nbytes} bytes: {used} of {cap} bytes held by referenced objects"
            raise StoreFullError(msg, nbytes, cap, used)
        for oid, _ in evictable:  # oldest first
            if self._used + nbytes <= cap:
                break
            self._remove(oid, evicted=True)


class FakeStoreClient:
    """A client of a :class:`FakeObjectStore`, with the API of ``rayfield.store.StoreClient``.

    See ``StoreClient`` for every method's contract; errors are the same classes.

    Args:
        store: the store to talk to.
        kind: ``"driver"``, ``"worker"`` or ``"tool"``.
        name: unused; kept for the signature.
    """

    def __init__(self, store: FakeObjectStore, kind: str = "driver", name: str = "") -> None:
        if kind not in ("driver", "worker", "tool"):
            raise InvalidRequestError(f"unknown client kind {kind!r}")
        self._store, self.name, self.closed = store, name, False
        self._events: collections.deque[tuple[str, bytes, int, int]] | None = None
        with store._locked():
            self.client_id = next(store._client_ids)
            store._clients[self.client_id] = self

    node_id = property(lambda self: self._store.node_id)
    arena_size = property(lambda self: self._store.capacity_bytes)

    @contextlib.contextmanager
    def _open(self) -> Iterator[FakeObjectStore]:
        with self._store._locked():
            if self.closed:
                raise StoreConnectionError("the client is closed")
            yield self._store

    def close(self) -> None:
        """Disconnect: drop every reference and abort the objects this client left unsealed."""
        with self._store._locked():
            if self.closed:
                return
            self.closed = True
            store, me = self._store, self.client_id
            for oid, obj in list(store._objects.items()):
                if not obj.sealed and obj.owner == me:
                    store._remove(oid)
                elif me in obj.refs:
                    store._drop_ref(oid, me, obj.refs[me])
            del store._clients[me]
            store._cond.notify_all()

    def __enter__(self) -> FakeStoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self, object_id: bytes, data_size: int, metadata: bytes = b"") -> memoryview:
        """Reserve an object; returns its writable data. The creator's reference ends at seal."""
        oid, metadata = _check_id(object_id), bytes(metadata)
        if data_size < 0:
            raise InvalidRequestError(f"data_size must be >= 0, got {data_size}")
        with self._open() as store:
            if oid in store._objects:
                raise ObjectExistsError(f"object {oid.hex()} exists")
            store._reserve(data_size + len(metadata))
            obj = store._objects[oid] = _Object(data_size, metadata, self.client_id)
            store._used += obj.nbytes
            return memoryview(obj.data)

    def _unsealed(self, store: FakeObjectStore, oid: bytes) -> _Object:
        obj = store._objects.get(_check_id(oid))
        if obj is None:
            raise ObjectNotFoundError(f"object {oid.hex()} not found")
        if obj.sealed:
            raise ObjectAlreadySealedError(f"object {oid.hex()} is sealed")
        if obj.owner != self.client_id:
            raise NotOwnerError(f"object {oid.hex()} was created by another client")
        return obj

    def seal(self, object_id: bytes) -> None:
        """Make an object readable and drop the creator's reference."""
        with self._open() as store:
            obj = self._unsealed(store, object_id)
            obj.sealed = True
            store._notify(("sealed", object_id, len(obj.data), len(obj.metadata)))
            store._drop_ref(object_id, self.client_id)

    def abort(self, object_id: bytes) -> None:
        """Remove an object this client created and has not sealed."""
        with self._open() as store:
            self._unsealed(store, object_id)
            store._remove(object_id)

    def put(self, object_id: bytes, data: Any, metadata: bytes = b"") -> None:
        """Create, write and seal an object in one step."""
        view = memoryview(data).cast("B")
        with self._open():
            self.create(object_id, view.nbytes, metadata)[:] = view
            self.seal(object_id)

    def get(
        self, object_ids: Sequence[bytes], timeout_s: float | None = None
    ) -> list[FakeObjectBuffer | None]:
        """Wait until every object is sealed or the timeout passes (``None``: forever)."""
        ids = [_check_id(oid) for oid in object_ids]
        deadline = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
        with self._open() as store:
            while not all(o in store._objects and store._objects[o].sealed for o in ids):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                store._cond.wait(left)
                if self.closed:
                    raise StoreConnectionError("the client was closed during get")
            out: list[FakeObjectBuffer | None] = []
            for oid in ids:
                obj = store._objects.get(oid)
                if obj is None or not obj.sealed:
                    out.append(None)
                    continue
                obj.refs[self.client_id] = obj.refs.get(self.client_id, 0) + 1
                store._objects.move_to_end(oid)
                out.append(FakeObjectBuffer(obj, oid, self))
            return out

    def release(self, object_id: bytes) -> None:
        """Drop one reference this client holds on the object (none held: no effect)."""
        with self._open() as store:
            store._drop_ref(_check_id(object_id), self.client_id)

    def _drop(self, oid: bytes) -> None:
        with self._store._locked():
            if not self.closed:
                self._store._drop_ref(oid, self.client_id)

    def contains(self, object_id: bytes) -> bool:
        """Whether the object is in the store and sealed."""
        with self._open() as store:
            obj = store._objects.get(_check_id(object_id))
            return obj is not None and obj.sealed

    def delete(self, object_ids: Sequence[bytes]) -> list[bool]:
        """Delete unreferenced objects now, referenced ones when their last reference goes."""
        ids = [_check_id(oid) for oid in object_ids]
        with self._open() as store:
            out = []
            for oid in ids:
                obj = store._objects.get(oid)
                if obj is not None and obj.sealed and not obj.refs:
                    store._remove(oid)
                elif obj is not None:  # referenced, or unsealed: removed at the last release
                    obj.doomed = True
                else:  # freed before it came here: a deletion of no bytes
                    store._notify(("deleted", oid, 0, 0))
                out.append(obj is not None and oid not in store._objects)
            return out

    def list_objects(self) -> list[dict[str, Any]]:
        """Every object with its id, sizes, state and reference count."""
        with self._open() as store:
            return store.list_objects()

    def stats(self) -> dict[str, int]:
        """Capacity, bytes used, object count, evictions and client count."""
        with self._open() as store:
            return store.stats()

    def subscribe(self) -> None:
        """Start receiving ``(kind, id, data_size, metadata_size)`` events: kind ``"sealed"``,
        ``"deleted"`` (a client deleted or freed it) or ``"evicted"`` (dropped to make room)."""
        with self._open():
            if self._events is None:
                self._events = collections.deque()

    def next_notification(
        self, timeout_s: float | None = None
    ) -> tuple[str, bytes, int, int] | None:
        """The next event, waiting up to ``timeout_s`` (``None``: forever); ``None`` if none."""
        deadline = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
        with self._open() as store:
            while not self._events:  # never subscribed: nothing will come
                left = None if deadline is None else deadline - time.monotonic()
                if (left is not None and left <= 0) or self.closed:
                    return None
                store._cond.wait(left)
            return self._events.popleft()


# ---- conformance suite -------------------------------------------------------------------
