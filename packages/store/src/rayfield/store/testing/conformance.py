"""The behaviour every object store implementation must show, as a pytest class."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

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
from rayfield.store.testing.fake import ID_SIZE


def _eventually(check: Callable[[], Any], timeout_s: float = 5.0, what: str = "") -> Any:
    """Poll ``check`` until it returns something truthy (disconnects are asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, f"timed out after {timeout_s} s waiting for {what or check}"
            return result
        time.sleep(0.01)


def _info(client: Any, oid: bytes) -> Any:
    """The ``list_objects`` row of ``oid``, or None."""
    return next((o for o in client.list_objects() if o["object_id"] == oid), None)


def _wait_event(client: Any, kind: str, oid: bytes, timeout_s: float = 5.0) -> tuple:
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        event = client.next_notification(timeout_s=left)
        if event is not None and event[0] == kind and event[1] == oid:
            return event
    raise AssertionError(f"no {kind!r} notification for {oid.hex()} in {timeout_s} s")


class ObjectStoreConformance:
    """Behaviour every object store implementation must show; subclass once per implementation.

    Subclasses implement :meth:`make_store`; every test gets fresh stores through the
    ``connect`` fixture, which also closes the clients it opened. Call order per test:
    ``make_store(capacity_bytes)`` is entered, ``connect()`` is called one or more times,
    the clients are closed, the context manager is exited.

    Example:
        >>> class TestFake(ObjectStoreConformance):
        ...     @contextlib.contextmanager
        ...     def make_store(self, capacity_bytes):
        ...         yield FakeObjectStore(capacity_bytes).connect
    """

    #: Capacity of the store each test gets, in bytes.
    capacity_bytes: int = 8 << 20

    def make_store(
        self, capacity_bytes: int
    ) -> contextlib.AbstractContextManager[Callable[[], Any]]:
        """A context manager for a fresh, empty store of ``capacity_bytes``.

        It yields a callable that opens a new client of that store (same API as
        ``StoreClient``); clients are closed before the context manager exits.
        """
        raise NotImplementedError

    @pytest.fixture
    def connect(self) -> Iterator[Callable[[], Any]]:
        """Opens clients of one fresh store; closes them after the test."""
        clients: list[Any] = []
        with self.make_store(self.capacity_bytes) as open_client:

            def connect() -> Any:
                clients.append(open_client())
                return clients[-1]

            try:
                yield connect
            finally:
                for client in clients:
                    client.close()
                clients.clear()
                gc.collect()

    @pytest.fixture
    def client(self, connect: Callable[[], Any]) -> Any:
        """One client of a fresh store."""
        return connect()

    def test_put_get_roundtrip(self, client: Any) -> None:
        oid, data = os.urandom(ID_SIZE), os.urandom(1000)
        client.put(oid, data, metadata=b"META")
        [buf] = client.get([oid], timeout_s=1.0)
        assert bytes(buf) == data and buf.metadata == b"META"
        assert buf.object_id == oid and buf.size == len(buf) == 1000
        buf.release()

    def test_create_write_seal(self, connect: Callable[[], Any]) -> None:
        writer, reader = connect(), connect()
        oid = os.urandom(ID_SIZE)
        view = writer.create(oid, 64, metadata=b"m")
        assert len(view) == 64 and not view.readonly
        view[:] = bytes(range(64))
        assert reader.get([oid], timeout_s=0.05) == [None]  # not readable before seal
        assert not reader.contains(oid)
        writer.seal(oid)
        [buf] = reader.get([oid], timeout_s=1.0)
        assert bytes(buf) == bytes(range(64)) and buf.metadata == b"m"

    def test_zero_size_object(self, client: Any) -> None:
        oid = os.urandom(ID_SIZE)
        client.put(oid, b"", metadata=b"x")
        [buf] = client.get([oid], timeout_s=1.0)
        assert len(buf) == 0 and bytes(buf) == b"" and buf.metadata == b"x"

    def test_get_blocks_until_sealed(self, connect: Callable[[], Any]) -> None:
        writer, reader = connect(), connect()
        oid = os.urandom(ID_SIZE)
        writer.create(oid, 3)[:] = b"abc"
        timer = threading.Timer(0.2, writer.seal, args=(oid,))
        start = time.monotonic()
        timer.start()
        try:
            [buf] = reader.get([oid], timeout_s=10.0)
        finally:
            timer.join()
        assert bytes(buf) == b"abc" and 0.1 < time.monotonic() - start < 5.0

    def test_get_timeout_returns_none(self, client: Any) -> None:
        present, absent = os.urandom(ID_SIZE), os.urandom(ID_SIZE)
        client.put(present, b"here")
        start = time.monotonic()
        buf, missing = client.get([present, absent], timeout_s=0.2)
        assert 0.15 < time.monotonic() - start < 5.0
        assert bytes(buf) == b"here" and missing is None
        assert client.get([absent], timeout_s=0) == [None]

    def test_buffer_is_read_only_numpy_view(self, client: Any) -> None:
        np = pytest.importorskip("numpy")
        oid, array = os.urandom(ID_SIZE), np.arange(1000, dtype=np.float64)
        client.put(oid, array)
        [buf] = client.get([oid], timeout_s=1.0)
        view = np.frombuffer(buf, dtype=np.float64)
        assert np.array_equal(view, array) and not view.flags.writeable
        with pytest.raises(ValueError):
            view[0] = 1.0
        assert memoryview(buf).readonly
        with pytest.raises(TypeError):
            memoryview(buf)[0] = 1

    def test_reference_counts(self, connect: Callable[[], Any]) -> None:
        client, other = connect(), connect()
        oid = os.urandom(ID_SIZE)
        client.create(oid, 10)
        creator_ref = _info(other, oid)["ref_count"]
        assert creator_ref == 1, (
            f"the creator holds 1 reference until seal, ref_count={creator_ref}"
        )
        client.seal(oid)
        assert _info(other, oid)["ref_count"] == 0
        [a] = client.get([oid], timeout_s=1.0)
        [b] = other.get([oid], timeout_s=1.0)
        assert _info(client, oid)["ref_count"] == 2
        a.release()
        a.release()  # a second release of the same buffer does nothing
        assert _eventually(lambda: _info(client, oid)["ref_count"] == 1)
        other.release(oid)
        assert _eventually(lambda: _info(client, oid)["ref_count"] == 0)
        del b

    def test_buffer_released_by_garbage_collection(self, client: Any) -> None:
        np = pytest.importorskip("numpy")
        oid = os.urandom(ID_SIZE)
        client.put(oid, b"\x01" * 64)
        [buf] = client.get([oid], timeout_s=1.0)
        view = np.frombuffer(buf, dtype=np.uint8)
        del buf
        gc.collect()
        assert _info(client, oid)["ref_count"] == 1  # the numpy view keeps it alive
        assert int(view.sum()) == 64
        del view
        gc.collect()
        assert _eventually(lambda: _info(client, oid)["ref_count"] == 0)

    def test_contains(self, client: Any) -> None:
        oid = os.urandom(ID_SIZE)
        assert not client.contains(oid)
        client.create(oid, 1)
        assert not client.contains(oid)
        client.seal(oid)
        assert client.contains(oid)
        client.delete([oid])
        assert not client.contains(oid)

    def test_delete_unreferenced_and_unknown(self, client: Any) -> None:
        oid = os.urandom(ID_SIZE)
        client.put(oid, b"x")
        assert client.delete([oid, os.urandom(ID_SIZE)]) == [True, False]
        assert not client.contains(oid) and _info(client, oid) is None
        client.put(oid, b"again")  # the id can be reused
        assert client.contains(oid)

    def test_delete_referenced_is_deferred(self, connect: Callable[[], Any]) -> None:
        client, holder, subscriber = connect(), connect(), connect()
        subscriber.subscribe()
        oid = os.urandom(ID_SIZE)
        client.put(oid, b"held", metadata=b"mm")
        [buf] = holder.get([oid], timeout_s=1.0)
        assert client.delete([oid]) == [False]
        assert _info(client, oid) is not None  # still there while referenced
        buf.release()
        _eventually(lambda: _info(client, oid) is None, what="deferred delete")
        assert _wait_event(subscriber, "deleted", oid) == ("deleted", oid, 4, 2)

    def test_abort(self, connect: Callable[[], Any]) -> None:
        client, other = connect(), connect()
        oid = os.urandom(ID_SIZE)
        with pytest.raises(ObjectNotFoundError):
            client.abort(oid)
        client.create(oid, 100)
        with pytest.raises(NotOwnerError):
            other.abort(oid)
        client.abort(oid)
        assert _info(client, oid) is None and client.get([oid], timeout_s=0) == [None]
        client.put(oid, b"new")  # the id is free again
        with pytest.raises(ObjectAlreadySealedError):
            client.abort(oid)

    def test_seal_errors(self, connect: Callable[[], Any]) -> None:
        client, other = connect(), connect()
        oid = os.urandom(ID_SIZE)
        with pytest.raises(ObjectNotFoundError):
            client.seal(oid)
        client.create(oid, 1)
        with pytest.raises(NotOwnerError):
            other.seal(oid)
        client.seal(oid)
        with pytest.raises(ObjectAlreadySealedError):
            client.seal(oid)

    def test_create_existing_id(self, client: Any) -> None:
        unsealed, sealed = os.urandom(ID_SIZE), os.urandom(ID_SIZE)
        client.create(unsealed, 1)
        client.put(sealed, b"x")
        for oid in (unsealed, sealed):
            with pytest.raises(ObjectExistsError):
                client.create(oid, 1)
            with pytest.raises(ObjectExistsError):
                client.put(oid, b"y")

    @pytest.mark.parametrize("bad_id", [b"", b"x" * 19, b"x" * 21])
    def test_wrong_id_length(self, client: Any, bad_id: bytes) -> None:
        for call in (
            lambda: client.create(bad_id, 1),
            lambda: client.put(bad_id, b"x"),
            lambda: client.get([bad_id], timeout_s=0),
            lambda: client.seal(bad_id),
            lambda: client.contains(bad_id),
            lambda: client.delete([bad_id]),
        ):
            with pytest.raises(InvalidRequestError):
                call()
        client.put(os.urandom(ID_SIZE), b"still works")

    def test_list_objects(self, client: Any) -> None:
        created, sealed = os.urandom(ID_SIZE), os.urandom(ID_SIZE)
        client.create(created, 7, metadata=b"abc")
        client.put(sealed, b"12345")
        rows = {row["object_id"]: row for row in client.list_objects()}
        keys = {"object_id", "data_size", "metadata_size", "state", "ref_count", "create_time_ms"}
        assert set(rows) == {created, sealed} and all(set(r) == keys for r in rows.values())
        assert (rows[created]["state"], rows[created]["data_size"]) == ("created", 7)
        assert rows[created]["metadata_size"] == 3
        assert rows[created]["ref_count"] == 1, "the creator's reference counts until seal"
        assert (rows[sealed]["state"], rows[sealed]["data_size"]) == ("sealed", 5)
        assert isinstance(rows[sealed]["create_time_ms"], int)

    def test_stats(self, connect: Callable[[], Any]) -> None:
        client = connect()
        before = client.stats()
        keys = {"capacity_bytes", "used_bytes", "num_objects", "num_evictions", "evicted_bytes"}
        keys |= {"num_spilled", "spilled_bytes", "num_restored"}
        assert keys | {"num_clients"} == set(before)
        assert before["capacity_bytes"] >= self.capacity_bytes and before["num_objects"] == 0
        oid = os.urandom(ID_SIZE)
        client.put(oid, bytes(5000), metadata=b"meta")
        after = client.stats()
        assert after["num_objects"] == 1 and after["used_bytes"] >= before["used_bytes"] + 5004
        client.delete([oid])
        assert client.stats()["used_bytes"] == before["used_bytes"]
        other = connect()
        assert client.stats()["num_clients"] == before["num_clients"] + 1
        other.close()
        _eventually(lambda: client.stats()["num_clients"] == before["num_clients"])

    def test_disconnect_releases_references(self, connect: Callable[[], Any]) -> None:
        client, holder = connect(), connect()
        oid = os.urandom(ID_SIZE)
        client.put(oid, b"x" * 100)
        bufs = [holder.get([oid], timeout_s=1.0)[0] for _ in range(3)]
        assert _info(client, oid)["ref_count"] == 3
        holder.close()
        _eventually(lambda: _info(client, oid)["ref_count"] == 0, what="references dropped")
        assert client.delete([oid]) == [True]
        del bufs

    def test_disconnect_aborts_unsealed(self, connect: Callable[[], Any]) -> None:
        client, creator = connect(), connect()
        oid = os.urandom(ID_SIZE)
        creator.create(oid, 1000)
        creator.close()
        _eventually(lambda: _info(client, oid) is None, what="unsealed object removed")
        client.put(oid, b"reused")

    def test_lru_eviction(self, connect: Callable[[], Any]) -> None:
        client, subscriber = connect(), connect()
        size = self.capacity_bytes // 8 - 4096
        subscriber.subscribe()
        ids: list[bytes] = []
        for _ in range(32):  # fill until the first eviction
            ids.append(os.urandom(ID_SIZE))
            client.put(ids[-1], bytes(size))
            gone = [o for o in ids if not client.contains(o)]
            if gone:
                break
        assert gone and gone == ids[: len(gone)], "evicted objects must be the oldest"
        assert _wait_event(subscriber, "evicted", ids[0]) == ("evicted", ids[0], size, 0)
        order = ids[len(gone) :]
        [buf] = client.get([order[0]], timeout_s=1.0)  # a get makes it the most recent
        buf.release()
        order.append(order.pop(0))
        for _ in range(32):
            oid = os.urandom(ID_SIZE)
            client.put(oid, bytes(size))
            gone = [o for o in order if not client.contains(o)]
            if gone:
                break
            order.append(oid)
        assert gone and gone == order[: len(gone)], "evicted objects must be the oldest"
        stats = client.stats()
        assert stats["num_evictions"] >= 2 and stats["evicted_bytes"] >= 2 * size

    def test_store_full_when_referenced(self, connect: Callable[[], Any]) -> None:
        client, holder = connect(), connect()
        size, capacity = self.capacity_bytes * 6 // 10, client.stats()["capacity_bytes"]
        held, unsealed, new = (os.urandom(ID_SIZE) for _ in range(3))
        client.put(held, bytes(size))
        [buf] = holder.get([held], timeout_s=1.0)
        with pytest.raises(StoreFullError) as info:
            client.create(new, size)
        assert not isinstance(info.value, ObjectTooLargeError)
        assert (info.value.requested_bytes, info.value.capacity_bytes) == (size, capacity)
        assert info.value.used_bytes >= size and client.contains(held)
        buf.release()
        _eventually(lambda: _info(client, held)["ref_count"] == 0, what="release")
        client.create(unsealed, size)  # evicts `held`, now unreferenced
        _eventually(lambda: not client.contains(held), what="eviction")
        with pytest.raises(StoreFullError):  # an unsealed object is never evicted
            client.put(new, bytes(size))
        client.abort(unsealed)
        client.put(new, bytes(size))

    def test_object_too_large(self, client: Any) -> None:
        capacity = client.stats()["capacity_bytes"]
        with pytest.raises(ObjectTooLargeError) as info:
            client.create(os.urandom(ID_SIZE), capacity + 1)
        assert isinstance(info.value, StoreFullError)
        assert info.value.requested_bytes == capacity + 1
        client.put(os.urandom(ID_SIZE), b"fine")

    def test_notifications(self, connect: Callable[[], Any]) -> None:
        subscriber, client = connect(), connect()
        subscriber.subscribe()
        assert subscriber.next_notification(timeout_s=0.05) is None
        oid = os.urandom(ID_SIZE)
        client.put(oid, b"12345", metadata=b"ab")
        assert _wait_event(subscriber, "sealed", oid) == ("sealed", oid, 5, 2)
        client.delete([oid])
        assert _wait_event(subscriber, "deleted", oid) == ("deleted", oid, 5, 2)

    def test_freeing_an_absent_object_is_notified(self, connect: Callable[[], Any]) -> None:
        """A free of an id that never came here is a deletion of no bytes (the node tells
        the node making it)."""
        subscriber, client = connect(), connect()
        subscriber.subscribe()
        oid = os.urandom(ID_SIZE)
        assert client.delete([oid]) == [False]
        assert _wait_event(subscriber, "deleted", oid) == ("deleted", oid, 0, 0)

    def test_concurrent_clients(self, connect: Callable[[], Any]) -> None:
        clients = [connect() for _ in range(4)]
        errors: list[BaseException] = []

        def work(index: int) -> None:
            try:
                client = clients[index]
                for i in range(50):
                    oid = bytes([index, i]) * 10
                    client.put(oid, oid * (i + 1))
                    [buf] = clients[(index + 1) % 4].get([oid], timeout_s=5.0)
                    assert bytes(buf) == oid * (i + 1)
                    buf.release()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors, errors
        assert clients[0].stats()["num_objects"] == 200

    def test_closed_client_raises(self, client: Any) -> None:
        client.close()
        client.close()  # idempotent
        assert client.closed
        with pytest.raises(StoreConnectionError):
            client.put(os.urandom(ID_SIZE), b"x")


# ---- real nodes --------------------------------------------------------------------------
