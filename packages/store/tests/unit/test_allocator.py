"""Unit tests of the arena's best-fit allocator (offsets only, no memory)."""

from __future__ import annotations

import itertools
import random

import pytest

from rayfield.store._native import AllocatorState

ALIGN = 64


def test_blocks_are_aligned_and_disjoint() -> None:
    a = AllocatorState(1 << 20)
    blocks = []
    for size in [1, 63, 64, 65, 1000, 4096, 0]:
        off = a.allocate(size)
        assert off is not None and off % ALIGN == 0
        blocks.append((off, a.block_size(off)))
        assert a.block_size(off) >= max(size, 1)
    blocks.sort()
    for (o1, s1), (o2, _) in itertools.pairwise(blocks):
        assert o1 + s1 <= o2
    assert a.info()["used"] == sum(s for _, s in blocks)


def test_full_then_free_reuses_space() -> None:
    a = AllocatorState(10 * ALIGN)
    offs = [a.allocate(ALIGN) for _ in range(10)]
    assert None not in offs
    assert a.allocate(1) is None
    a.free(offs[3])
    assert a.allocate(ALIGN) == offs[3]


def test_coalescing_restores_one_free_block() -> None:
    a = AllocatorState(1 << 16)
    offs = [a.allocate(1000) for _ in range(20)]
    random.Random(1).shuffle(offs)
    for off in offs:
        a.free(off)
    info = a.info()
    assert info["used"] == 0
    assert info["largest_free"] == info["capacity"]
    assert a.allocate(info["capacity"]) == 0


def test_best_fit_picks_the_smallest_hole() -> None:
    a = AllocatorState(100 * ALIGN)
    x = a.allocate(10 * ALIGN)
    a.allocate(ALIGN)  # keeps holes apart
    y = a.allocate(2 * ALIGN)
    a.allocate(ALIGN)
    a.free(x)  # hole of 10 units
    a.free(y)  # hole of 2 units
    assert a.allocate(2 * ALIGN) == y


def test_too_large_and_double_free() -> None:
    a = AllocatorState(1 << 12)
    assert a.allocate((1 << 12) + 1) is None
    off = a.allocate(100)
    a.free(off)
    a.free(off)  # ignored: not allocated any more
    assert a.info()["used"] == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_workload_keeps_accounting_exact(seed: int) -> None:
    rng = random.Random(seed)
    a = AllocatorState(1 << 20)
    live: dict[int, int] = {}
    for _ in range(3000):
        if live and rng.random() < 0.45:
            off = rng.choice(list(live))
            a.free(off)
            del live[off]
        else:
            off = a.allocate(rng.randint(0, 20000))
            if off is not None:
                assert off not in live
                live[off] = a.block_size(off)
        assert a.info()["used"] == sum(live.values())
    spans = sorted(live.items())
    for (o1, s1), (o2, _) in itertools.pairwise(spans):
        assert o1 + s1 <= o2
