"""Unit tests of the object table: states, references and LRU eviction."""

from __future__ import annotations

import pytest

from rayfield.store import (
    InvalidRequestError,
    NotOwnerError,
    ObjectAlreadySealedError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StoreFullError,
)
from rayfield.store._native import ObjectTableState

A, B = 1, 2


def oid(n: int) -> bytes:
    return n.to_bytes(20, "big")


def sealed(t: ObjectTableState, n: int, size: int = 1000, client: int = A) -> None:
    t.create(client, oid(n), size)
    t.seal(client, oid(n))


def test_lifecycle_and_events() -> None:
    t = ObjectTableState(1 << 20)
    t.create(A, oid(1), 100, 10)
    assert t.acquire(B, oid(1)) is None  # not sealed: invisible
    assert t.list_objects()[0]["ref_count"] == 1  # the creator's, until seal
    t.seal(A, oid(1))
    assert t.events() == [("sealed", oid(1))]
    assert t.acquire(B, oid(1)) is not None
    [info] = t.list_objects()
    assert (info["state"], info["ref_count"], info["data_size"], info["metadata_size"]) == (
        "sealed",
        1,
        100,
        10,
    )
    assert t.delete(oid(1)) is False  # referenced: deleted later
    t.release(B, oid(1))
    assert t.events() == [("deleted", oid(1))]
    assert t.list_objects() == []


def test_errors_are_typed() -> None:
    t = ObjectTableState(1 << 20)
    t.create(A, oid(1), 10)
    with pytest.raises(ObjectExistsError):
        t.create(B, oid(1), 10)
    with pytest.raises(NotOwnerError):
        t.seal(B, oid(1))
    t.seal(A, oid(1))
    with pytest.raises(ObjectAlreadySealedError):
        t.seal(A, oid(1))
    with pytest.raises(ObjectAlreadySealedError):
        t.abort(A, oid(1))
    with pytest.raises(ObjectNotFoundError):
        t.seal(A, oid(2))
    with pytest.raises(InvalidRequestError):
        t.release(A, oid(1))  # A holds no reference
    with pytest.raises(InvalidRequestError):
        t.create(A, b"short", 10)


def test_lru_evicts_least_recently_used_first() -> None:
    t = ObjectTableState(4096)
    for n in range(4):
        sealed(t, n, 1000)
    # Use object 0 again: it becomes the most recently used.
    t.acquire(A, oid(0))
    t.release(A, oid(0))
    t.events()
    sealed(t, 9, 1000)
    assert ("deleted", oid(1)) in t.events()
    ids = {o["object_id"] for o in t.list_objects()}
    assert oid(0) in ids and oid(1) not in ids
    assert t.stats()["num_evictions"] == 1


def test_referenced_and_unsealed_objects_are_never_evicted() -> None:
    t = ObjectTableState(4096)
    sealed(t, 1, 2000)
    t.acquire(B, oid(1))
    t.create(A, oid(2), 1500)  # unsealed
    with pytest.raises(StoreFullError) as err:
        t.create(A, oid(3), 1500)
    assert err.value.requested_bytes == 1500
    assert err.value.capacity_bytes == 4096
    assert err.value.used_bytes >= 3500
    assert "1500 bytes requested" in str(err.value)
    t.release(B, oid(1))
    t.create(A, oid(3), 1500)  # object 1 is evictable now
    assert t.stats()["num_evictions"] == 1


def test_too_large_is_its_own_error() -> None:
    t = ObjectTableState(4096)
    with pytest.raises(ObjectTooLargeError) as err:
        t.create(A, oid(1), 5000)
    assert isinstance(err.value, StoreFullError)


def test_client_gone_drops_references_and_aborts_unsealed() -> None:
    t = ObjectTableState(1 << 20)
    sealed(t, 1)
    t.acquire(B, oid(1))
    t.acquire(B, oid(1))
    t.create(B, oid(2), 10)
    t.client_gone(B)
    objs = {o["object_id"]: o for o in t.list_objects()}
    assert oid(2) not in objs
    assert objs[oid(1)]["ref_count"] == 0
    assert t.delete(oid(1)) is True


def test_delete_pending_until_sealed_and_released() -> None:
    t = ObjectTableState(1 << 20)
    t.create(A, oid(1), 10)
    assert t.delete(oid(1)) is False
    t.seal(A, oid(1))
    assert oid(1) not in {o["object_id"] for o in t.list_objects()}


def test_pins_and_buffers_decide_what_may_be_spilled() -> None:
    t = ObjectTableState(1 << 20)
    t.pin(B, oid(1))  # before the object exists
    sealed(t, 1)
    sealed(t, 2)
    t.pin(B, oid(2))
    assert t.spill_candidate() == oid(1)  # the oldest held by pins only
    t.acquire(B, oid(1))  # a mapped buffer: never spilled
    assert t.spill_candidate() == oid(2)
    t.release(B, oid(1))  # drops the buffer, the pin stays
    assert t.spill_candidate() == oid(1)
    t.unpin(B, oid(1))  # unreferenced: evictable, not spillable
    assert t.spill_candidate() == oid(2)


def test_spilled_objects_free_space_and_come_back() -> None:
    t = ObjectTableState(4096)
    t.pin(B, oid(1))
    sealed(t, 1, 3000)
    with pytest.raises(StoreFullError):
        t.create(A, oid(2), 3000)  # pinned: not evictable
    t.mark_spilled(oid(1), 7)
    assert t.stats()["used_bytes"] == 0
    assert (t.stats()["num_spilled"], t.stats()["spilled_bytes"]) == (1, 3000)
    assert t.acquire(B, oid(1)) is None  # not in the arena until restored
    t.create(A, oid(2), 3000)
    assert t.restore(oid(1)) is None  # the unsealed object holds the space
    t.seal(A, oid(2))
    assert t.restore(oid(1)) is not None  # evicts the unreferenced oid(2)
    assert t.stats()["num_restored"] == 1 and t.stats()["num_spilled"] == 0
    assert t.acquire(B, oid(1)) is not None
    t.events()
    t.release(B, oid(1))
    t.unpin(B, oid(1))
    t.mark_spilled(oid(1), 7)  # not spillable any more: ignored
    assert t.delete(oid(1))
    assert ("deleted", oid(1)) in t.events()
