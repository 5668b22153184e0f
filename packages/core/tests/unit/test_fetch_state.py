"""The node's fetch state machine (``node_manager/fetch_state.py``), without sockets."""

from __future__ import annotations

from rayfield._private.node_manager.fetch_state import (
    FIRST_LOOKUP_S,
    LOST_ROUNDS,
    MAX_BACKOFF_S,
    Discard,
    Fetch,
    FetchState,
    LookUp,
    Lost,
    Poll,
    Recorded,
    Release,
    Wake,
)

CODE = b"\x00CODE\x00" + bytes(14)


def oid(i: int) -> bytes:
    return i.to_bytes(20, "big")


def state() -> FetchState:
    return FetchState(is_code=lambda object_id: object_id.startswith(b"\x00CODE\x00"))


def tick(s: FetchState, now: float, here: frozenset[bytes] = frozenset()) -> list[object]:
    """One round of the fetch loop, the local store holding ``here``."""
    hinted, to_check = s.due(now)
    for o in to_check:
        if o in here:
            s.here(o)
    return list(s.plan(hinted + [o for o in to_check if o not in here]))


def test_a_missing_object_is_first_looked_for_here_then_in_the_directory() -> None:
    s = state()
    assert s.missing(oid(1), now=10.0) == []  # no wake: it may be being made here
    assert tick(s, 10.0) == []  # not due yet
    assert tick(s, 10.0 + FIRST_LOOKUP_S) == [LookUp((oid(1),))]


def test_a_local_hit_ends_the_want_without_any_request() -> None:
    s = state()
    s.missing(oid(1), now=0.0)
    assert tick(s, 1.0, here=frozenset({oid(1)})) == []
    assert oid(1) not in s.wanted and tick(s, 5.0) == []


def test_a_remote_fetch_found_in_the_directory_records_the_copy() -> None:
    s = state()
    s.missing(oid(1), now=0.0)
    assert tick(s, 1.0) == [LookUp((oid(1),))]
    assert s.found(oid(1), ["b:1", "c:1"]) == [Fetch(oid(1), ("b:1", "c:1"))]
    assert oid(1) in s.inflight and oid(1) not in s.wanted
    assert s.arrived(oid(1), "b:1", release=True) == [Recorded(oid(1))]  # not made there
    s.fetch_done(oid(1), got=True, now=1.1)
    assert not s.inflight and not s.wanted and not s.backoff


def test_a_forwarded_tasks_result_is_long_polled_at_its_maker_and_released_there() -> None:
    s = state()
    s.made_at(oid(1), "b:1", now=0.0)
    s.made_at(oid(2), "b:1", now=0.0)
    assert s.missing(oid(1), now=0.0) == [Wake()]  # asked at once, where it is made
    s.missing(oid(2), now=0.0)
    [poll] = tick(s, 0.0)
    assert poll == Poll("b:1", (oid(1), oid(2)))
    assert tick(s, 0.0) == []  # one poll a node at a time
    # oid(1) came whole in the reply; oid(2) is not done yet
    assert s.arrived(oid(1), "b:1", release=True) == [Recorded(oid(1)), Release("b:1", oid(1))]
    actions = s.poll_done("b:1", {oid(1): True, oid(2): False}, {oid(1)}, now=0.5)
    assert actions == [Wake()]  # something came: more are likely done
    assert s.wanted[oid(2)][0] == 0.5 and oid(1) not in s.wanted
    assert tick(s, 0.5) == [Poll("b:1", (oid(2),))]


def test_a_large_result_found_by_the_poll_is_pulled_from_its_maker() -> None:
    s = state()
    s.made_at(oid(1), "b:1", now=0.0)
    s.missing(oid(1), now=0.0)
    tick(s, 0.0)
    actions = s.poll_done("b:1", {oid(1): True}, set(), now=0.2)
    assert actions == [Fetch(oid(1), ("b:1",)), Wake()]


def test_a_fetch_that_finds_nothing_is_retried_with_a_doubling_delay() -> None:
    s = state()
    s.want(oid(1), now=0.0)
    delays = []
    now = 0.0
    for _ in range(6):
        now = s.wanted[oid(1)][0]
        assert tick(s, now) == [LookUp((oid(1),))]
        s.found(oid(1), ["b:1"])
        s.looked_up([oid(1)])
        s.fetch_done(oid(1), got=False, now=now)  # b:1 did not have it after all
        delays.append(round(s.wanted[oid(1)][0] - now, 3))
    assert delays == [0.2, 0.4, 0.8, 1.6, MAX_BACKOFF_S, MAX_BACKOFF_S]


def test_an_object_being_looked_up_is_not_looked_up_again_until_that_ends() -> None:
    s = state()
    s.want(oid(1), now=0.0)
    assert tick(s, 1.0) == [LookUp((oid(1),))]
    s.want(oid(2), now=1.0)
    assert tick(s, 5.0) == [LookUp((oid(2),))]  # the lookup of oid(1) runs still
    s.not_found([oid(1)], orphaned=set(), now=5.0)
    s.looked_up([oid(1)])
    assert tick(s, 5.0 + 2 * FIRST_LOOKUP_S) == [LookUp((oid(1),))]  # due again, after backoff


def test_an_object_found_nowhere_backs_off() -> None:
    s = state()
    s.want(oid(1), now=0.0)
    tick(s, FIRST_LOOKUP_S)
    assert s.not_found([oid(1)], orphaned=set(), now=1.0) == []
    assert s.wanted[oid(1)] == (1.0 + 2 * FIRST_LOOKUP_S, 2 * FIRST_LOOKUP_S)


def test_an_object_whose_owner_died_is_lost_only_after_rounds_agree() -> None:
    s = state()
    s.want(oid(1), now=0.0)
    for round_ in range(1, LOST_ROUNDS):
        assert s.not_found([oid(1)], orphaned={oid(1)}, now=float(round_)) == []
        assert oid(1) in s.wanted
    assert s.not_found([oid(1)], orphaned={oid(1)}, now=9.0) == [Lost(oid(1))]
    assert oid(1) not in s.wanted and not s.lost_strikes


def test_a_round_that_finds_the_owner_alive_resets_the_strikes() -> None:
    s = state()
    s.want(oid(1), now=0.0)
    s.not_found([oid(1)], orphaned={oid(1)}, now=1.0)
    s.not_found([oid(1)], orphaned=set(), now=2.0)  # e.g. a copy appeared meanwhile
    assert s.not_found([oid(1)], orphaned={oid(1)}, now=3.0) == []


def test_duplicate_requests_start_one_fetch() -> None:
    s = state()
    s.want(oid(1), now=0.0, hint=None)
    assert s.want(oid(1), now=0.0) == []  # wanted already
    assert s.start_fetch(oid(1), ["b:1"]) == [Fetch(oid(1), ("b:1",))]
    assert s.start_fetch(oid(1), ["c:1"]) == []  # one fetch an object
    assert s.missing(oid(1), now=0.0) == []  # being fetched
    assert s.found(oid(1), ["c:1"]) == []


def test_a_result_made_here_for_another_node_is_never_fetched() -> None:
    s = state()
    s.hold([oid(1)])
    assert s.missing(oid(1), now=0.0) == [] and not s.wanted
    assert s.unhold([oid(1), oid(2)]) == [oid(1)]
    assert s.unhold([oid(1)]) == []


def test_code_is_asked_of_the_gcs_at_once_then_of_the_nodes() -> None:
    s = state()
    assert s.want(CODE, now=0.0) == [Wake()]
    assert tick(s, 0.0) == [Fetch(CODE, ())]  # no addresses: the GCS first
    s.code_not_in_gcs(CODE)
    s.fetch_done(CODE, got=False, now=0.0)
    now = s.wanted[CODE][0]
    assert tick(s, now) == [LookUp((CODE,))]  # then like any object


def test_an_announced_object_is_pulled_when_wanted_and_at_once_if_wanted_already() -> None:
    s = state()
    assert s.announced_by(oid(1), "b:1") == []  # not wanted: remembered
    assert s.want(oid(1), now=0.0, delay_s=1.0) == [Fetch(oid(1), ("b:1",))]  # pulled now
    assert s.want(oid(1), now=0.0) == []  # its pull runs
    assert s.fetch_done(oid(1), got=False, now=0.0) == []  # failed: wanted again later
    assert oid(1) in s.wanted
    s.want(oid(2), now=0.0)
    assert s.announced_by(oid(2), "b:1") == [Fetch(oid(2), ("b:1",))]


def test_a_node_death_drops_its_hints_and_the_failed_poll_leads_to_the_directory() -> None:
    s = state()
    s.made_at(oid(1), "b:1", now=0.0)
    s.missing(oid(1), now=0.0)
    assert tick(s, 0.0) == [Poll("b:1", (oid(1),))]
    s.node_died("b:1")  # the poll fails with it
    assert s.poll_done("b:1", {oid(1): False}, set(), now=1.0) == []
    assert "b:1" not in s.polling
    assert tick(s, 1.01) == [LookUp((oid(1),))]  # no hint any more: the directory


def test_a_failed_fetch_is_not_retried_but_a_missing_event_starts_it_again() -> None:
    s = state()
    s.want(oid(1), now=0.0)
    s.start_fetch(oid(1), ["b:1"])
    s.fetch_done(oid(1), got=False, now=1.0, retry=False)
    assert not s.wanted and not s.inflight
    s.missing(oid(1), now=2.0)
    assert oid(1) in s.wanted


def test_an_object_that_arrives_by_push_cancels_its_want() -> None:
    s = state()
    s.want(oid(1), now=0.0, hint="b:1", delay_s=1.0)  # an argument b:1 said it pushes
    assert s.arrived(oid(1), "b:1", release=False) == [Recorded(oid(1))]  # no Release
    assert not s.wanted and tick(s, 5.0) == []


def test_an_unlisted_result_back_from_its_maker_is_released_not_recorded() -> None:
    """Results of actor calls (``made_at(..., listed=False)``): the directory lists
    neither their maker nor the copy that came back; other copies are still recorded."""
    s = state()
    s.made_at(oid(1), "b:1", now=0.0, listed=False)
    s.made_at(oid(2), "b:1", now=0.0)
    assert s.arrived(oid(1), "b:1", release=True) == [Release("b:1", oid(1))]
    assert s.arrived(oid(2), "b:1", release=True) == [Recorded(oid(2)), Release("b:1", oid(2))]
    assert not s.unlisted and not s.made_at_
    s.made_at(oid(3), "b:1", now=0.0, listed=False)
    assert s.arrived(oid(3), "c:1", release=True) == [Recorded(oid(3))]  # from another node
    s.made_at(oid(4), "b:1", now=0.0, listed=False)
    s.node_died("b:1")
    assert not s.unlisted


def test_a_result_freed_unread_is_polled_at_its_maker_and_discarded_there_once_made() -> None:
    """An actor call's result nobody reads: its owner frees it before any copy came
    here; the maker is polled until it is made, then told to free it (no copy here),
    and nothing of it stays in the state."""
    s = state()
    s.made_at(oid(1), "b:1", now=0.0, listed=False)
    assert s.freed(oid(1), now=1.0, copy_here=False) == [Wake()]
    assert tick(s, 1.0) == [Poll("b:1", (oid(1),))]
    assert s.poll_done("b:1", {oid(1): False}, set(), now=2.0) == []  # not made yet
    assert tick(s, 3.0) == [Poll("b:1", (oid(1),))]
    actions = s.poll_done("b:1", {oid(1): True}, set(), now=4.0)
    assert actions == [Discard("b:1", oid(1), listed=False), Wake()]
    for table in (s.wanted, s.made_at_, s.unlisted, s.abandoned, s.inflight):
        assert oid(1) not in table
    assert tick(s, 9.0) == []


def test_a_listed_result_freed_unread_is_discarded_with_its_directory_row() -> None:
    s = state()
    s.made_at(oid(1), "b:1", now=0.0)  # a forwarded task's result: the directory lists it
    s.freed(oid(1), now=0.0, copy_here=False)
    tick(s, 0.0)
    assert s.poll_done("b:1", {oid(1): True}, set(), now=1.0)[0] == Discard(
        "b:1", oid(1), listed=True
    )


def test_a_free_of_an_object_not_made_elsewhere_only_ends_its_want() -> None:
    s = state()
    s.missing(oid(1), now=0.0)
    assert s.freed(oid(1), now=0.0, copy_here=False) == [] and oid(1) not in s.wanted
    assert s.freed(oid(2), now=0.0, copy_here=False) == []  # unknown here: nothing to do
    assert tick(s, 9.0) == []


def test_a_result_freed_while_it_is_fetched_arrives_and_is_released_as_usual() -> None:
    s = state()
    s.made_at(oid(1), "b:1", now=0.0, listed=False)
    s.missing(oid(1), now=0.0)
    tick(s, 0.0)
    assert s.poll_done("b:1", {oid(1): True}, set(), now=0.1) == [
        Fetch(oid(1), ("b:1",)),
        Wake(),
    ]
    assert s.freed(oid(1), now=0.2, copy_here=False) == []  # the pull runs
    assert s.arrived(oid(1), "b:1", release=True) == [Release("b:1", oid(1))]
    assert oid(1) not in s.abandoned


def test_an_abandoned_result_of_a_dead_maker_is_not_looked_for_elsewhere() -> None:
    s = state()
    s.made_at(oid(1), "b:1", now=0.0, listed=False)
    s.freed(oid(1), now=0.0, copy_here=False)
    s.node_died("b:1")
    assert oid(1) not in s.wanted and oid(1) not in s.abandoned
    assert tick(s, 9.0) == []


def test_a_result_freed_before_its_call_was_sent_is_abandoned_when_it_is() -> None:
    s = state()
    assert (
        s.freed(oid(1), now=0.0, copy_here=False) == []
    )  # the call still waits here for its actor
    assert s.made_at(oid(1), "b:1", now=1.0, listed=False) == [Wake()]
    assert oid(1) in s.abandoned and not s.freed_early
    assert tick(s, 1.0) == [Poll("b:1", (oid(1),))]


def test_a_free_of_an_object_whose_copy_was_here_is_not_remembered() -> None:
    """Results made here (or stored here) that their owner frees after reading them, the
    common case, leave nothing in the state: no call of this node sends them anywhere
    later (a soak filled ``freed_early`` to its bound with them)."""
    s = state()
    s.missing(oid(1), now=0.0)
    assert s.freed(oid(1), now=0.0, copy_here=True) == [] and oid(1) not in s.wanted
    for i in range(2, 1000):
        s.freed(oid(i), now=0.0, copy_here=True)
    assert not s.freed_early and not s.wanted and not s.abandoned


def test_a_result_made_elsewhere_and_freed_with_a_copy_here_is_still_abandoned() -> None:
    s = state()
    s.made_at(oid(1), "b:1", now=0.0, listed=False)
    assert s.freed(oid(1), now=1.0, copy_here=True) == [Wake()]
    assert oid(1) in s.abandoned and not s.freed_early


def test_the_ids_freed_early_are_bounded() -> None:
    from rayfield._private.node_manager import fetch_state

    s = state()
    for i in range(fetch_state.FREED_EARLY_MAX + 10):
        s.freed(oid(i), now=0.0, copy_here=False)
    assert len(s.freed_early) == fetch_state.FREED_EARLY_MAX
    assert oid(0) not in s.freed_early and oid(fetch_state.FREED_EARLY_MAX + 9) in s.freed_early


def test_a_gone_drivers_results_made_elsewhere_are_discarded_there_once_made() -> None:
    """A driver exits with refs to results still being made on other nodes (and one it
    waited for): each is polled at its maker and discarded there; another job's results
    stay wanted."""
    job, other = b"J" * 12, b"K" * 12
    mine = [job + i.to_bytes(8, "big") for i in range(3)]
    theirs = other + bytes(8)
    s = state()
    s.made_at(mine[0], "b:1", now=0.0, listed=False)
    s.made_at(mine[1], "c:1", now=0.0)
    s.made_at(theirs, "b:1", now=0.0)
    s.missing(mine[0], now=0.0)
    s.missing(mine[2], now=0.0)  # a put of the driver's, looked for in the directory
    s.missing(theirs, now=0.0)
    assert Wake() in s.job_gone(job, now=1.0)
    assert mine[2] not in s.wanted and set(s.abandoned) == {mine[0], mine[1]}
    polls = {p.address: set(p.object_ids) for p in tick(s, 1.0) if isinstance(p, Poll)}
    assert polls == {"b:1": {mine[0], theirs}, "c:1": {mine[1]}}
    got = s.poll_done("b:1", {mine[0]: True, theirs: True}, set(), now=2.0)
    assert Discard("b:1", mine[0], listed=False) in got and Fetch(theirs, ("b:1",)) in got
    assert s.poll_done("c:1", {mine[1]: True}, set(), now=2.0)[0] == Discard(
        "c:1", mine[1], listed=True
    )
    assert not s.abandoned and not any(o[:12] == job for o in s.made_at_)
