"""The copies of a node's objects elsewhere (``node_manager/copies.py``), without processes."""

from __future__ import annotations

from rayfield._private.node_manager.copies import QUIET_MAX, CopyBook, Freed, Unrecord

BIG = 200 << 20
SMALL = 100


def oid(i: int) -> bytes:
    return i.to_bytes(20, "big")


def test_a_freed_large_object_is_freed_where_it_went_and_looked_up_in_the_directory() -> None:
    book = CopyBook()
    book.copied([oid(1)], "n2:1")  # announced to n2 (pushed)
    book.copied([oid(1)], "n3:1")
    assert book.gone(oid(1), evicted=False, size=BIG) == Freed(
        oid(1), frozenset({"n2:1", "n3:1"}), ask_gcs=True, recorded=False
    )
    assert len(book) == 0
    # a large object made and freed here, copied nowhere we know of: the directory is asked
    assert book.gone(oid(2), evicted=False, size=BIG) == Freed(
        oid(2), frozenset(), ask_gcs=True, recorded=False
    )


def test_a_freed_small_object_only_leaves_the_directory_and_only_if_recorded() -> None:
    book = CopyBook()
    book.record([oid(1)])
    book.copied([oid(1), oid(2)], "maker:1")  # results that came back inline
    assert book.gone(oid(1), evicted=False, size=SMALL) == Freed(
        oid(1), frozenset(), ask_gcs=False, recorded=True
    )
    assert book.gone(oid(2), evicted=False, size=SMALL) is None  # never recorded: nothing
    assert book.gone(oid(3), evicted=False, size=SMALL) is None  # never heard of
    assert len(book) == 0


def test_an_evicted_copy_only_takes_this_nodes_row_away() -> None:
    book = CopyBook()
    book.record([oid(1)])
    book.copied([oid(1)], "source:1")
    assert book.gone(oid(1), evicted=True, size=BIG) == Unrecord(oid(1))
    # the object lives on elsewhere: a later free here (it came back) frees no other copy
    # through this node's stale knowledge
    assert book.gone(oid(1), evicted=False, size=SMALL) is None
    book.copied([oid(2)], "source:1")
    assert book.gone(oid(2), evicted=True, size=BIG) is None  # not recorded: nothing
    assert len(book) == 0


def test_what_another_node_freed_is_forgotten_so_its_removal_here_says_nothing() -> None:
    book = CopyBook()
    book.record([oid(1)])
    book.copied([oid(1), oid(2)], "owner:1")
    assert book.freed_elsewhere([oid(1), oid(2), oid(3)]) == [oid(1)]  # the recorded ones
    assert book.gone(oid(1), evicted=False, size=BIG) is None  # nobody is told back
    assert book.gone(oid(2), evicted=True, size=BIG) is None
    assert len(book) == 1  # oid(3) never came: quiet until QUIET_MAX newer ones push it out
    book.freed_elsewhere(oid(10 + i) for i in range(QUIET_MAX))
    assert len(book) == QUIET_MAX and oid(3) not in book.quiet


def test_a_dead_peer_is_never_told() -> None:
    book = CopyBook()
    book.copied([oid(1)], "dead:1")
    book.copied([oid(1), oid(2)], "alive:1")
    book.copied([oid(3)], "dead:1")
    book.node_died("dead:1")
    assert book.gone(oid(1), evicted=False, size=BIG) == Freed(
        oid(1), frozenset({"alive:1"}), ask_gcs=True, recorded=False
    )
    assert set(book.peers) == {oid(2)}
