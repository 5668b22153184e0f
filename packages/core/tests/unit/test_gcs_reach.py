"""When a node gives up on a GCS that does not answer (``gcs_reach.py``), without a GCS."""

from __future__ import annotations

import math

import pytest

from rayfield._private.node_manager.gcs_reach import (
    ENV_GCS_RECONNECT_TIMEOUT_S,
    GcsReach,
    Reach,
    reconnect_timeout_from_env,
)
from rayfield._private.node_manager.membership import Membership, PeerView
from rayfield._private.protocol.types import NodeInfo


def test_a_short_outage_is_waited_out_and_the_count_restarts_when_the_gcs_answers() -> None:
    reach = GcsReach(10.0, now=0.0)
    assert reach.observe(True, 1.0) is Reach.UP
    assert reach.observe(False, 1.5) is Reach.LOST
    assert reach.observe(False, 10.9) is Reach.WAITING  # 9.9 s since it last answered
    assert reach.observe(True, 11.0) is Reach.BACK
    assert reach.observe(True, 11.5) is Reach.UP
    assert reach.observe(False, 12.0) is Reach.LOST
    assert reach.observe(False, 20.9) is Reach.WAITING  # counts from 11.5, not from 1.0
    assert not reach.gave_up


def test_the_node_gives_up_once_the_timeout_after_the_gcs_last_answered() -> None:
    reach = GcsReach(10.0, now=0.0)
    reach.observe(True, 5.0)
    assert reach.observe(False, 5.5) is Reach.LOST
    assert reach.observe(False, 14.9) is Reach.WAITING
    assert reach.observe(False, 15.0) is Reach.GIVE_UP
    assert reach.unreachable_s(15.0) == 10.0
    assert reach.observe(False, 16.0) is Reach.WAITING  # said once
    assert reach.gave_up


def test_a_gcs_never_reached_counts_from_the_start() -> None:
    reach = GcsReach(2.0, now=100.0)
    assert reach.observe(False, 101.0) is Reach.LOST
    assert reach.observe(False, 102.0) is Reach.GIVE_UP


def test_a_slow_failing_call_past_the_timeout_gives_up_on_its_first_round() -> None:
    reach = GcsReach(1.0, now=0.0)
    assert reach.observe(False, 3.0) is Reach.GIVE_UP  # one call took 3 s to fail


@pytest.mark.parametrize("timeout_s", [0.0, -1.0, math.inf])
def test_zero_negative_or_infinite_timeout_never_gives_up(timeout_s: float) -> None:
    reach = GcsReach(timeout_s, now=0.0)
    assert reach.observe(False, 1.0) is Reach.LOST
    assert reach.observe(False, 1e9) is Reach.WAITING


def test_nan_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        GcsReach(math.nan, now=0.0)


def test_the_timeout_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_GCS_RECONNECT_TIMEOUT_S, raising=False)
    assert reconnect_timeout_from_env() == 60.0
    monkeypatch.setenv(ENV_GCS_RECONNECT_TIMEOUT_S, " 2.5 ")
    assert reconnect_timeout_from_env() == 2.5
    monkeypatch.setenv(ENV_GCS_RECONNECT_TIMEOUT_S, "soon")
    with pytest.raises(ValueError, match="not a number of seconds"):
        reconnect_timeout_from_env()


class _DownGcs:
    """A GCS client whose GCS has gone: every call fails."""

    address, timeout_s = "gcs:1", 1.0

    def with_limits(self, timeout_s: float, retry_deadline_s: float) -> _DownGcs:
        return self

    def heartbeat(self, *args: object) -> bool:
        raise ConnectionError("GCS down")

    def get_nodes(self) -> list[NodeInfo]:
        raise ConnectionError("GCS down")


def test_membership_calls_on_gcs_gone_once_with_why(caplog: pytest.LogCaptureFixture) -> None:
    me = NodeInfo(node_id=b"M" * 20, address="a:1")
    gone: list[str] = []
    membership = Membership(
        _DownGcs(),  # type: ignore[arg-type]
        me,
        PeerView(me.node_id, me.address),
        snapshot=lambda: {"available": {}},
        infeasible=lambda snap: [],
        on_died=lambda node: None,
        after_round=lambda: None,
        reconnect_timeout_s=3.0,
        on_gcs_gone=gone.append,
    )
    start = membership.reach.last_reached
    assert membership.judge(membership.beat(), start + 1.0) is Reach.LOST
    assert gone == []
    assert membership.judge(membership.beat(), start + 3.0) is Reach.GIVE_UP
    assert membership.judge(membership.beat(), start + 4.0) is Reach.WAITING
    assert len(gone) == 1 and "gcs:1 has not answered for 3.0 s" in gone[0]
    assert "shutting this node down" in caplog.text
