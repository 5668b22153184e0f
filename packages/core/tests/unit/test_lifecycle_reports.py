"""A node's reports of released actor handles to the actor's home (``Lifecycle``), with
fakes, no processes: a release that does not last (calls forwarded here in batches, each
holding its actor while it runs) is not reported; one that lasts is, once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rayfield._private.common.actor_scope import ActorScopes
from rayfield._private.node_manager import lifecycle
from rayfield._private.node_manager.lifecycle import Lifecycle
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.protocol.types import NodeInfo
from rayfield.testing import wait_for

ME, HOME = b"A" * 20, b"B" * 20
ACTOR = HOME[:6] + bytes(14)  # created by a process of node B


class Stub:
    def __init__(self, reports: list[list[bytes]]) -> None:
        self.reports = reports

    def actors_released(self, actor_ids: list[bytes]) -> None:
        self.reports.append(list(actor_ids))


class Channels:
    def __init__(self) -> None:
        self.reports: list[list[bytes]] = []

    def stub(self, address: str) -> Stub:
        assert address == "b:1"
        return Stub(self.reports)


def make() -> tuple[Lifecycle, Channels]:
    peers = PeerView(ME, "a:1")
    peers.update([NodeInfo(node_id=ME, address="a:1"), NodeInfo(node_id=HOME, address="b:1")])
    channels = Channels()
    lc = Lifecycle(
        ME,
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        ActorScopes(lambda actor_id: actor_id[:6] == ME[:6]),
        peers,
        channels,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        lambda fn, *args: fn(*args),
        lambda job_id: None,
    )
    return lc, channels


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Lifecycle, Channels]]:
    monkeypatch.setattr(lifecycle, "REPORT_DELAY_S", 0.05)
    lc, channels = make()
    yield lc, channels
    lc.close()


def test_a_release_that_lasts_is_reported_once(node: tuple[Lifecycle, Channels]) -> None:
    lc, channels = node
    lc.handles_changed(ACTOR, True, False)
    lc.handles_changed(ACTOR, False, False)
    lc.handles_changed(ACTOR, True, False)  # held again before the report was due
    lc.handles_changed(ACTOR, False, False)  # released again: one report is due
    wait_for(lambda: channels.reports, message="the report")
    wait_for(lambda: not lc._reports, message="no report due")
    assert channels.reports == [[ACTOR]]


def test_a_release_that_does_not_last_is_not_reported(node: tuple[Lifecycle, Channels]) -> None:
    lc, channels = node
    lc.handles_changed(ACTOR, True, False)
    lc.handles_changed(ACTOR, False, False)
    lc.handles_changed(ACTOR, True, False)  # the next batch holds it again
    wait_for(lambda: not lc._reports, message="the due report looked at")
    lc._scope_pool.shutdown(wait=True)  # a report queued would have run by now
    assert channels.reports == []


def test_a_report_to_a_stopping_node_is_dropped(monkeypatch: Any) -> None:
    monkeypatch.setattr(lifecycle, "REPORT_DELAY_S", 0.01)
    lc, channels = make()
    lc.close()
    lc.handles_changed(ACTOR, False, False)
    wait_for(lambda: not lc._reports, message="the due report looked at")
    assert channels.reports == []


def test_releases_due_together_go_in_one_report(node: tuple[Lifecycle, Channels]) -> None:
    lc, channels = node
    other = HOME[:6] + b"\x01" + bytes(13)  # a second actor of node B
    for actor_id in (ACTOR, other):
        lc.handles_changed(actor_id, True, False)
        lc.handles_changed(actor_id, False, False)
    wait_for(lambda: channels.reports, message="the report")
    lc._scope_pool.shutdown(wait=True)
    assert sorted(a for report in channels.reports for a in report) == sorted([ACTOR, other])
    assert len(channels.reports) <= 2  # one call per due round
