"""ObjectRef, the handle of an object in the store, and per-process reference counting.

Every process counts its live ObjectRefs per object id. The first ref of an id pins the
object in the node's store (the pin also works before the object exists, so task returns
are pinned from birth); when the last one is garbage collected, the pin is released (in
batches). An object this process owns (it put it, or submitted the task that returns it)
is then freed as soon as nobody else holds it, unless its ref escaped into another object
or message (then it is only unpinned, and evicted when space is needed).

Pins are not mappings: an object held only by pins (no ``get`` buffer alive) may be spilled
to disk by a full store and is restored when it is read, so the tracker releases its pins
with ``unpin``, never as buffer releases.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from rayfield._private import context
from rayfield._private.common import serialization
from rayfield._private.common.ids import ID_SIZE

if TYPE_CHECKING:  # imported where used: asyncio costs every process 30 ms to import
    import concurrent.futures

__all__ = ["ObjectRef", "RefTracker"]

_RELEASE_BATCH = 128


class RefTracker:
    """Counts ObjectRefs per id in this process and pins/releases them in the store."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._counts: dict[bytes, int] = {}
        self._lock = threading.Lock()
        self._to_release: list[bytes] = []
        self._to_free: list[bytes] = []
        self._owned: set[bytes] = set()
        self._escaped: set[bytes] = set()

    def own(self, oid: bytes) -> None:
        """This process created the object: free it when its last ref here goes."""
        self._owned.add(oid)

    def escaped(self, oid: bytes) -> None:
        """A ref was serialized: others may hold it unpinned, so never free it eagerly."""
        self._escaped.add(oid)

    def add(self, oid: bytes, pinned: bool) -> None:
        """Count a new ref to ``oid`` in this process; the first one pins the object unless
        ``pinned`` (its pin was sent already)."""
        with self._lock:
            n = self._counts.get(oid, 0)
            self._counts[oid] = n + 1
        if n == 0 and not pinned:
            self._client.pin([oid])

    def pin_live(self, oids: list[bytes]) -> set[bytes]:
        """Pin those of ``oids`` that refs here count (their refs were made with
        ``_pinned=True`` before their objects, whose pins are sent now); returns them.
        Under the lock, so a release of one of them goes after its pin."""
        with self._lock:
            live = [oid for oid in oids if oid in self._counts]
            if live:
                self._client.pin(live)
        return set(live)

    def pinned_by_caller(self, oid: bytes) -> None:
        """Count a ref whose pin the caller already sent (e.g. task returns)."""
        with self._lock:
            n = self._counts.get(oid, 0)
            self._counts[oid] = n + 1
        if n > 0:  # a second pin for an id we already hold: drop the extra one
            self._to_release.append(oid)

    def remove(self, oid: bytes) -> None:
        """Uncount a ref; the last one releases the object (frees it when this process owns it and
        it did not escape)."""
        with self._lock:
            n = self._counts.get(oid, 0) - 1
            if n > 0:
                self._counts[oid] = n
                return
            self._counts.pop(oid, None)
            if oid in self._owned:
                self._owned.discard(oid)
                if oid in self._escaped:
                    self._escaped.discard(oid)
                    self._to_release.append(oid)
                else:
                    self._to_free.append(oid)
            else:
                self._to_release.append(oid)
            # Frees go out at once (memory comes back); plain releases in batches.
            flush = bool(self._to_free) or len(self._to_release) >= _RELEASE_BATCH
        if flush:
            self.flush()

    def flush(self) -> None:
        """Send the releases and frees batched so far to the node (nothing once the
        connection is closed)."""
        with self._lock:
            batch, self._to_release = self._to_release, []
            free, self._to_free = self._to_free, []
        if self._client.closed:
            return
        if batch:
            self._client.unpin(batch)
        if free:
            self._client.unpin(free, True)


T = TypeVar("T")
_tracker: RefTracker | None = None


def set_tracker(tracker: RefTracker | None) -> None:
    """Make ``tracker`` count this process's refs (None: refs are not counted)."""
    global _tracker
    _tracker = tracker


class ObjectRef(Generic[T]):
    """A reference to an immutable object in the object store (Ray's ``ObjectRef``,
    classic name ``ObjectID``); ``T`` is the type of the object's value.

    Hashable, comparable, printable and picklable (a ref nested inside another object or
    passed to another process stays a ref). ``await ref`` and ``ref.future()`` give its
    value asynchronously.

    Args:
        object_id: the 20-byte id (``binary()`` of another ref).

    Raises:
        ValueError: ``object_id`` is not 20 bytes long.
    """

    __slots__ = ("__weakref__", "_counted", "_id")

    def __init__(self, object_id: bytes, *, _pinned: bool = False) -> None:
        if len(object_id) != ID_SIZE:
            raise ValueError(f"an ObjectRef id is {ID_SIZE} bytes, got {len(object_id)}")
        self._id = object_id
        tracker = _tracker
        self._counted = tracker is not None
        if tracker is not None:
            if _pinned:
                tracker.pinned_by_caller(object_id)
            else:
                tracker.add(object_id, False)

    def __del__(self) -> None:
        tracker = _tracker
        if self._counted and tracker is not None:
            try:
                tracker.remove(self._id)
            except Exception:  # interpreter shutdown, closed connection
                pass

    def binary(self) -> bytes:
        """The 20-byte id."""
        return self._id

    def hex(self) -> str:
        """The id as 40 hex characters."""
        return self._id.hex()

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __repr__(self) -> str:
        return f"ObjectRef({self._id.hex()})"

    def __reduce__(self) -> Any:
        ctx = serialization.current_context()
        if ctx is not None:
            ctx.contained_refs.append(self)
        tracker = _tracker
        if tracker is not None:
            tracker.escaped(self._id)
        return (ObjectRef, (self._id,))

    def future(self) -> concurrent.futures.Future[T]:
        """A concurrent.futures.Future that resolves to the value (or its error)."""
        import concurrent.futures

        fut: concurrent.futures.Future[T] = concurrent.futures.Future()

        def resolve() -> None:
            try:
                fut.set_result(context.require().runtime.get([self], None)[0])
            except BaseException as exc:
                fut.set_exception(exc)

        threading.Thread(target=resolve, daemon=True, name="rayfield-future").start()
        return fut

    def __await__(self) -> Generator[Any, None, T]:
        import asyncio

        return asyncio.wrap_future(self.future()).__await__()


ObjectID = ObjectRef
