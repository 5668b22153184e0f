"""Spilling through a real node: pinned objects past the store's capacity go to disk and back."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from rayfield.store import StoreClient, StoreFullError
from rayfield.store.testing import local_node

MiB = 1 << 20


def _contents(i: int, size: int) -> bytes:
    """``size`` bytes distinct per ``i`` (a random block, rotated and tagged)."""
    block = hashlib.sha256(b"spill-%d" % i).digest() * (MiB // 32)
    block = block[i % 4096 :] + block[: i % 4096]
    return (b"%08d" % i + block[8:]) * (size // MiB)


def _create_pinned(client: StoreClient, data: bytes, metadata: bytes = b"") -> bytes:
    oid = os.urandom(20)
    client.pin([oid])  # the owner's pin, before the object exists (as rayfield.put does)
    view = client.create(oid, len(data), metadata)
    view[:] = data
    view.release()
    client.seal(oid)
    return oid


def _spill_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.spill")) if directory.exists() else []


def test_one_gigabyte_of_pinned_objects_through_a_100_mb_store(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    count, size = 50, 20 * MiB
    with local_node(tmp_path, 100 * MiB, spill_directory=spill) as node:
        with StoreClient(node.socket_path) as client:
            digests = {}
            for i in range(count):
                data = _contents(i, size)
                oid = _create_pinned(client, data, metadata=b"meta%d" % i)
                digests[oid] = (i, hashlib.sha256(data).hexdigest())
            stats = client.stats()
            assert stats["num_objects"] == count and stats["num_evictions"] == 0
            assert stats["num_spilled"] >= count - 5
            assert stats["spilled_bytes"] >= stats["num_spilled"] * size
            assert len(_spill_files(spill)) == stats["num_spilled"]
            for oid, (i, digest) in digests.items():
                [buf] = client.get([oid], timeout_s=30)
                assert buf is not None, f"object {i} was not restored"
                assert buf.metadata == b"meta%d" % i
                assert hashlib.sha256(buf).hexdigest() == digest, f"object {i} is corrupt"
                buf.release()
            assert client.stats()["num_restored"] >= count - 5
            assert node.stats()["num_spilled"] >= count - 5  # the host sees it too
        assert _spill_files(spill)
    assert _spill_files(spill) == [] and not spill.exists()  # stop removes the files


def test_delete_and_free_of_spilled_objects_remove_their_files(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    with (
        local_node(tmp_path, 100 * MiB, spill_directory=spill) as node,
        StoreClient(node.socket_path) as client,
    ):
        a, b, c = (_create_pinned(client, _contents(i, 40 * MiB)) for i in range(3))
        [a_file] = _spill_files(spill)  # a is the oldest
        assert a.hex() in a_file
        assert client.contains(a)  # restores a (spilling b, the oldest left)
        assert client.stats()["num_restored"] == 1
        [b_file] = [f for f in _spill_files(spill) if b.hex() in f]
        assert client.wait([b], 1, timeout_s=10) == [True]  # restores b (a kept its file)
        assert client.delete([a]) == [False]  # pinned: deleted with its last pin
        client.unpin([a])  # no reply: the stats call below waits for it to be handled
        assert client.stats()["num_restored"] == 2
        assert a_file not in _spill_files(spill)
        assert not client.contains(a)
        # b (without a write: it kept its file) and c go to disk to make room
        big = _create_pinned(client, _contents(9, 80 * MiB))
        assert client.stats()["num_spilled"] == 2
        [c_file] = [f for f in _spill_files(spill) if c.hex() in f]
        client.unpin([c], True)  # a free removes the file too
        assert client.stats()["num_objects"] == 2
        assert c_file not in _spill_files(spill)
        assert b_file in _spill_files(spill)
        client.unpin([b, big], True)
        assert client.stats()["num_objects"] == 0
        assert _spill_files(spill) == []


def _unwritable(tmp_path: Path) -> Path:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    return blocker / "spill"  # cannot be created, even by root


@pytest.mark.parametrize("kind", ["create", "put"])
def test_a_failed_spill_fails_the_create_and_loses_nothing(tmp_path: Path, kind: str) -> None:
    with (
        local_node(tmp_path, 100 * MiB, spill_directory=_unwritable(tmp_path)) as node,
        StoreClient(node.socket_path) as client,
    ):
        kept = _create_pinned(client, _contents(1, 60 * MiB))
        with pytest.raises(StoreFullError) as info:
            if kind == "create":
                client.create(os.urandom(20), 60 * MiB)
            else:
                client.put(os.urandom(20), _contents(2, 60 * MiB))
        message = str(info.value)
        assert "spilling failed" in message and "not-a-directory" in message
        assert info.value.requested_bytes == 60 * MiB
        [buf] = client.get([kept], timeout_s=5)
        assert bytes(buf) == _contents(1, 60 * MiB)
        buf.release()
        assert ("store_full", 60 * MiB) == _first_store_full(node)[:2]


def _first_store_full(node: Any) -> tuple[Any, ...]:
    for event in node.poll_events(timeout_s=1.0):
        if event[0] == "store_full":
            return event
    raise AssertionError("no store_full event")


def test_a_get_waits_for_space_to_restore(tmp_path: Path) -> None:
    """A spilled object that cannot fit while others are mapped is restored once they go."""
    spill = tmp_path / "spill"
    with (
        local_node(tmp_path, 100 * MiB, spill_directory=spill) as node,
        StoreClient(node.socket_path) as client,
        StoreClient(node.socket_path) as reader,
    ):
        a, b = (_create_pinned(client, _contents(i, 60 * MiB)) for i in range(2))
        [held] = client.get([b], timeout_s=5)  # b mapped: a cannot come back now
        assert reader.get([a], timeout_s=0.2) == [None]
        out: list[Any] = []  # a get parked on the restore, answered once b is released
        thread = threading.Thread(target=lambda: out.append(reader.get([a], timeout_s=10)))
        thread.start()
        held.release()
        thread.join()
        [buf] = out[0]
        assert buf is not None and bytes(memoryview(buf)[:8]) == b"%08d" % 0
        buf.release()
