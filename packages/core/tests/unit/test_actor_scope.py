"""The handle decisions of a node (``ActorScopes``), driven without processes."""

from __future__ import annotations

from typing import Any

from rayfield._private.common.actor_scope import ActorScopes, HandleCounter

HOME = b"home00"
MINE = HOME + bytes(14)
OTHER = b"other0" + bytes(14)


def scopes() -> ActorScopes:
    return ActorScopes(lambda actor_id: actor_id.startswith(HOME))


def test_an_actor_created_here_is_confirmed_then_ended_when_the_last_handle_goes() -> None:
    s = scopes()
    assert s.local(MINE, True, True) == []
    assert s.local(MINE, False, True) == [("confirm", MINE)]
    assert s.confirmed(MINE, False) == [("end", MINE)]
    assert s.confirmed(MINE, False) == []  # ended once


def test_a_handle_held_on_another_node_keeps_it_until_that_node_releases() -> None:
    s = scopes()
    s.local(MINE, True, True)
    assert s.local(MINE, False, False) == [("confirm", MINE)]
    assert s.confirmed(MINE, True) == []  # another node said it holds one
    assert s.peer_released(MINE) == [("confirm", MINE)]
    assert s.confirmed(MINE, False) == [("end", MINE)]


def test_a_handle_here_again_before_the_answer_keeps_it() -> None:
    s = scopes()
    s.local(MINE, True, True)
    s.local(MINE, False, False)
    s.local(MINE, True, False)  # a task brought a handle back meanwhile
    assert s.confirmed(MINE, False) == []
    assert s.peer_released(MINE) == []  # held here: no need to ask


def test_a_node_reports_only_actors_of_another_home() -> None:
    s = scopes()
    s.local(OTHER, True, False)
    assert s.local(OTHER, False, False) == [("report", OTHER)]
    s.local(MINE, True, False)  # named or detached: never scoped
    assert s.local(MINE, False, False) == []
    assert s.peer_released(MINE) == []


def test_a_dead_node_makes_the_home_ask_again_and_refusals_keep_the_actor() -> None:
    s = scopes()
    s.local(MINE, True, True)
    s.local(MINE, False, True)
    s.confirmed(MINE, True)
    assert s.peers_changed() == [("confirm", MINE)]
    assert s.confirmed(MINE, False) == [("end", MINE)]
    s.end_refused(MINE)  # the native node found a handle at the last moment
    assert s.peers_changed() == [("confirm", MINE)]
    s.forget(MINE)
    assert s.peers_changed() == []


class FakeClient:
    closed = False

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def actor_handles(self, ids: list[bytes], add: bool, oid: Any = None, scoped: bool = False):
        self.sent.append((tuple(ids), add, oid, scoped))


def test_a_process_reports_only_its_first_and_last_handle() -> None:
    client = FakeClient()
    counter = HandleCounter(client)
    counter.add(MINE, scoped=True)
    counter.add(MINE)
    counter.remove(MINE)
    assert client.sent == [((MINE,), True, None, True)]
    counter.remove(MINE)
    assert client.sent[-1] == ((MINE,), False, None, False)
    counter.in_object(b"o" * 20, [MINE])
    assert client.sent[-1] == ((MINE,), True, b"o" * 20, False)
