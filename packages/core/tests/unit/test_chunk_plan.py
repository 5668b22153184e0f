"""The chunk plan of a data-channel pull, driven with plain calls."""

from __future__ import annotations

import pytest

from rayfield._private.node_manager.chunk_plan import ChunkPlan


def drain(plan: ChunkPlan) -> list[tuple[int, int, str]]:
    out = []
    while (nxt := plan.next()) is not None:
        out.append(nxt)
    return out


def test_chunks_cover_the_object_after_start_and_alternate_sources() -> None:
    plan = ChunkPlan(25, 10, ["a", "b"], start=3)
    chunks = drain(plan)
    assert chunks == [(3, 10, "a"), (13, 10, "b"), (23, 2, "a")]
    assert not plan.complete
    for offset, length, _ in chunks:
        plan.done(offset, length)
    assert plan.complete and not plan.hopeless


def test_a_failed_chunk_goes_to_another_source_and_the_failed_source_is_dropped() -> None:
    plan = ChunkPlan(30, 10, ["a", "b"])
    first, second, third = drain(plan)
    plan.failed(first[0], first[1])  # "a" failed its chunk
    assert plan.sources == ["b"]
    retry = plan.next()
    assert retry == (0, 10, "b")
    for offset, length, _ in (second, third, retry):
        plan.done(offset, length)
    assert plan.complete


def test_every_source_failing_makes_the_plan_hopeless() -> None:
    plan = ChunkPlan(20, 10, ["a"])
    (offset, length, _), other = drain(plan)
    plan.failed(offset, length)
    assert plan.hopeless and plan.next() is None
    plan.failed(other[0], other[1])  # the other running chunk fails too: no error
    assert plan.hopeless and len(plan.pending) == 2


def test_an_empty_remainder_is_complete_at_once() -> None:
    assert ChunkPlan(0, 10, ["a"]).complete
    plan = ChunkPlan(8, 10, ["a"], start=8)
    assert plan.complete and plan.next() is None


def test_duplicate_sources_count_once_and_bad_arguments_are_refused() -> None:
    assert ChunkPlan(10, 5, ["a", "a", "b"]).sources == ["a", "b"]
    with pytest.raises(ValueError, match="chunk_bytes"):
        ChunkPlan(10, 0, ["a"])
    with pytest.raises(ValueError, match="start"):
        ChunkPlan(10, 5, ["a"], start=11)
    plan = ChunkPlan(10, 5, ["a"])
    with pytest.raises(KeyError):
        plan.done(0, 5)  # not running
