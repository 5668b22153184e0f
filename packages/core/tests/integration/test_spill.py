"""Spilling end to end: 1 GB of referenced numpy arrays through a 100 MB object store."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rayfield as rf

MiB = 1 << 20
COUNT, SIZE = 50, 20 * MiB


@rf.remote
def digest(a: np.ndarray) -> str:
    return hashlib.sha256(a).hexdigest()


def _array(i: int) -> np.ndarray:
    """20 MB of uint32 whose contents differ for every ``i``."""
    return np.arange(SIZE // 4, dtype=np.uint32) * np.uint32(2 * i + 1) + np.uint32(i)


@pytest.fixture
def small_store() -> Iterator[dict[str, Any]]:
    info = rf.init(object_store_memory=100 * MiB, num_cpus=2)
    try:
        yield info
    finally:
        rf.shutdown()


def test_one_gigabyte_of_puts_is_spilled_and_restored(small_store: dict[str, Any]) -> None:
    spill = Path(small_store["session_dir"]) / "spill"
    refs, digests = [], []
    for i in range(COUNT):
        a = _array(i)
        digests.append(hashlib.sha256(a).hexdigest())
        refs.append(rf.put(a))  # every ref kept: nothing may be evicted
        del a
    store = rf.state.list_nodes()[0]["ObjectStore"]
    assert store["num_evictions"] == 0
    assert store["num_spilled"] >= COUNT - 5 and store["spilled_bytes"] >= (COUNT - 5) * SIZE
    assert len(list(spill.glob("*.spill"))) >= COUNT - 5

    for i, ref in enumerate(refs):  # in the driver, zero-copy: one array mapped at a time
        a = rf.get(ref, timeout=30)
        assert a.shape == (SIZE // 4,) and a[1] == 2 * i + 1 + i
        assert hashlib.sha256(a).hexdigest() == digests[i], f"array {i} is corrupt"
        del a
    # in workers, the ref as a task argument
    assert rf.get([digest.remote(ref) for ref in refs], timeout=60) == digests
    assert rf.state.list_nodes()[0]["ObjectStore"]["num_restored"] >= COUNT - 5

    del refs, ref  # the owner's refs free the objects and their files
    for _ in range(100):
        if not list(spill.glob("*.spill")):
            break
        rf.get(rf.put(0))  # a round trip: the frees were sent before it
    assert not list(spill.glob("*.spill"))
