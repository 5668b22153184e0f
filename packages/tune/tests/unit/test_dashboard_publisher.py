"""The Tune page's data: what the driver publishes (bounded in size and rate) and what
the dashboard's page answers from it (fake key-value store and clock, no cluster)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from rayfield.tune import dashboard as D
from rayfield.tune.dashboard import DashboardPublisher, pick_metric
from rayfield.tune.dashboard_page import PAGE, page_data
from rayfield.tune.trial import Trial


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class KV:
    """The GCS key-value store's namespace ``tune``, as the publisher and page see it."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.puts = 0

    def store(self, key: str, value: bytes | None) -> None:
        if value is None:
            self.data.pop(key, None)
        else:
            self.puts += 1
            self.data[key] = value

    def keys(self, prefix: str) -> list[bytes]:
        return sorted(k.encode() for k in self.data if k.startswith(prefix))

    # the StateClient methods page_data uses
    def kv_keys(self, namespace: str, prefix: str) -> list[bytes]:
        assert namespace == D.KV_NAMESPACE
        return self.keys(prefix)

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        assert namespace == D.KV_NAMESPACE
        return self.data.get(key)


def publisher(kv: KV, clock: Clock, **kw: Any) -> DashboardPublisher:
    return DashboardPublisher("exp", "/tmp/exp", store=kv.store, keys=kv.keys, clock=clock, **kw)


def record(kv: KV, pub: DashboardPublisher) -> dict[str, Any]:
    return json.loads(kv.data[D.RECORD_PREFIX + pub.id])


def result(i: int, **metrics: float) -> dict[str, Any]:
    return {"training_iteration": i, "time_total_s": 0.1 * i, "done": False, **metrics}


def test_pick_metric_skips_counters_times_and_flags() -> None:
    assert pick_metric({"training_iteration": 1, "done": False, "loss": 0.5}) == "loss"
    assert pick_metric({"time_total_s": 1.0, "ok": True, "acc": float("nan"), "f1": 2}) == "f1"
    assert pick_metric({"training_iteration": 1, "name": "x"}) is None


def test_writes_are_rate_limited_and_the_end_is_always_written() -> None:
    kv, clock = KV(), Clock()
    pub = publisher(kv, clock, metric="loss", mode="min", interval_s=1.0)
    trial = Trial("f", {"x": 1}, trial_id="t1")
    pub.on_trial_add(trial)  # the first event writes at once
    assert pub.writes == 1
    trial.status = Trial.RUNNING
    for i in range(1, 50):
        clock.now += 0.01
        trial.last_result = result(i, loss=1.0 / i)
        pub.on_trial_result(trial, trial.last_result)
    assert pub.writes == 1  # 0.49 s: nothing more written
    clock.now += 0.6
    trial.last_result = result(50, loss=0.02)
    pub.on_trial_result(trial, trial.last_result)
    assert pub.writes == 2
    rec = record(kv, pub)
    assert rec["trials"][0]["status"] == "RUNNING" and len(rec["trials"][0]["points"]) == 50
    trial.status = Trial.TERMINATED
    pub.on_trial_complete(trial)
    pub.on_experiment_end([trial])
    rec = record(kv, pub)
    assert rec["finished"] is True and rec["counts"] == {"TERMINATED": 1}
    assert rec["best"] == {"name": str(trial), "value": 0.02}
    index = json.loads(kv.data[D.INDEX_PREFIX + pub.id])
    assert index == {k: rec[k] for k in ("id", "name", "updated_s", "finished", "counts", "total")}


def test_points_are_thinned_and_trials_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    kv, clock = KV(), Clock()
    pub = publisher(kv, clock, interval_s=1e9)  # no metric given: picked from the results
    trials = [Trial("f", {"x": i}, trial_id=f"t{i:04d}") for i in range(D.MAX_TRIALS + 50)]
    for trial in trials:
        pub.on_trial_add(trial)
    first = trials[0]
    for i in range(1, 1001):
        clock.now += 1.0
        pub.on_trial_result(first, result(i, acc=i / 1000))
    points = pub.record()["trials"][0]["points"]
    assert pub.metric == "acc"
    assert D.MAX_POINTS // 2 <= len(points) <= D.MAX_POINTS
    assert points[0] == [1.0, 0.001]  # the first point stays; the rest evenly thinned
    times = [p[0] for p in points]
    assert times == sorted(times) and times[-1] >= 990
    for trial in trials:  # all finish: only the newest MAX_TRIALS keep their points
        trial.status = Trial.TERMINATED
        pub.on_trial_complete(trial)
    rec = pub.record()
    assert rec["total"] == len(trials) and rec["counts"] == {"TERMINATED": len(trials)}
    assert [t["id"] for t in rec["trials"]] == [t.trial_id for t in reversed(trials)][
        : D.MAX_TRIALS
    ]
    assert first.trial_id not in pub._points  # the driver's memory stays bounded too
    # A record over MAX_BYTES drops its oldest trials to fit.
    monkeypatch.setattr(D, "MAX_BYTES", 4000)
    pub.on_experiment_end(trials)
    data = kv.data[D.RECORD_PREFIX + pub.id]
    assert len(data) <= 4000 and 0 < len(json.loads(data)["trials"]) < D.MAX_TRIALS


def test_old_experiments_are_removed() -> None:
    kv, clock = KV(), Clock()
    ids = []
    for _ in range(D.MAX_EXPERIMENTS + 3):
        clock.now += 1.0
        pub = publisher(kv, clock)
        pub.on_experiment_end([])
        ids.append(pub.id)
    kept = sorted(k.decode()[len(D.INDEX_PREFIX) :] for k in kv.keys(D.INDEX_PREFIX))
    assert kept == ids[-D.MAX_EXPERIMENTS :]
    assert len(kv.keys(D.RECORD_PREFIX)) == D.MAX_EXPERIMENTS


def test_a_failing_store_is_logged_once_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(key: str, value: bytes | None) -> None:
        raise ConnectionError("the GCS is gone")

    clock = Clock()
    pub = DashboardPublisher("e", "/p", store=broken, keys=lambda p: [], clock=clock)
    trial = Trial("f", {}, trial_id="t1")
    for _ in range(3):
        clock.now += 2
        pub.on_trial_add(trial)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the GCS is gone" in warnings[0].getMessage()
    assert pub.writes == 0


def test_page_data_picks_the_newest_or_the_asked_experiment() -> None:
    kv, clock = KV(), Clock()
    assert page_data(kv, {}) == {"experiments": [], "experiment": None}
    older = publisher(kv, clock)
    older.on_experiment_end([])
    clock.now += 5
    newer = DashboardPublisher("second", "/p", store=kv.store, keys=kv.keys, clock=clock)
    newer.on_trial_add(Trial("f", {}, trial_id="t9"))
    data = page_data(kv, {})
    assert [e["name"] for e in data["experiments"]] == ["second", "exp"]
    assert data["experiment"]["id"] == newer.id and data["experiment"]["total"] == 1
    assert page_data(kv, {"experiment": older.id})["experiment"]["name"] == "exp"
    with pytest.raises(ValueError, match="must be an experiment id"):
        page_data(kv, {"experiment": "../x"})
    with pytest.raises(ValueError, match="no Tune experiment 000000000000001-1"):
        page_data(kv, {"experiment": "000000000000001-1"})


@pytest.mark.parametrize(
    "bad",
    [b"not json", b"\xff\xfe", b"[1, 2]", b'"text"', b'{"name": "no id"}', b'{"id": "other"}'],
)
def test_malformed_records_in_the_kv_store_are_left_out_or_answered_400(bad: bytes) -> None:
    """Anyone who can write the cluster's KV store can put a bad record there: the page
    leaves bad index records out (it answered 500 before) and answers a bad experiment
    record with a ValueError (400)."""
    kv, clock = KV(), Clock()
    good = publisher(kv, clock)
    good.on_experiment_end([])
    kv.data[D.INDEX_PREFIX + "999999999999999-1"] = bad  # newer than the good one
    kv.data[D.INDEX_PREFIX + "not-an-id"] = kv.data[D.INDEX_PREFIX + good.id]
    kv.data[D.RECORD_PREFIX + "999999999999999-1"] = bad
    data = page_data(kv, {})
    assert [e["id"] for e in data["experiments"]] == [good.id]
    assert data["experiment"]["id"] == good.id
    if bad.startswith(b"{"):  # a JSON object: the page draws what it has
        page_data(kv, {"experiment": "999999999999999-1"})
    else:
        with pytest.raises(ValueError, match=r"record of Tune experiment .* is malformed"):
            page_data(kv, {"experiment": "999999999999999-1"})


def test_the_page_is_declared_for_the_dashboard() -> None:
    from rayfield.dashboard.pages import discover

    assert PAGE.name == "tune" and "rayfieldDashboard.addPage" in PAGE.script
    assert [p for p in discover() if p.name == "tune"] == [PAGE]
