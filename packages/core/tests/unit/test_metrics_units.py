"""Application metrics without processes: validation, a process's values, the merge of
process snapshots, the Prometheus text a node serves, and the scrape config files."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rayfield._private.common.app_metrics import ProcessMetrics, aggregate
from rayfield._private.node_manager import metrics_config
from rayfield._private.node_manager.metrics_exporter import _family
from rayfield.util import metrics
from rayfield.util.metrics import Counter, Gauge, Histogram


def test_bad_declarations_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="not a Prometheus name"):
        Counter("1bad")
    with pytest.raises(ValueError, match="not a Prometheus label name"):
        Counter("unit_ok", tag_keys=("bad-key",))
    with pytest.raises(TypeError, match="not the string"):
        Counter("unit_ok2", tag_keys="route")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs boundaries"):
        Histogram("unit_h0")
    with pytest.raises(ValueError, match="positive and increasing"):
        Histogram("unit_h1", boundaries=[1.0, 1.0])
    with pytest.raises(ValueError, match="positive and increasing"):
        Histogram("unit_h2", boundaries=[0.0, 1.0])
    Counter("unit_same", tag_keys=("a",))
    with pytest.raises(ValueError, match="exists already as a counter"):
        Gauge("unit_same", tag_keys=("a",))


def test_records_and_their_errors() -> None:
    c = Counter("unit_requests", tag_keys=("route", "code"))
    c.set_default_tags({"code": "200"})
    c.inc(tags={"route": "/"})
    c.inc(2, tags={"route": "/", "code": "200"})
    assert metrics._process_metrics().value("unit_requests", (("code", "200"), ("route", "/"))) == 3
    with pytest.raises(ValueError, match=r"needs a value for tag key\(s\) \['route'\]"):
        c.inc()
    with pytest.raises(ValueError, match="not among its tag_keys"):
        c.inc(tags={"route": "/", "method": "GET"})
    with pytest.raises(ValueError, match="only grows"):
        c.inc(-1, tags={"route": "/"})
    with pytest.raises(ValueError, match="records numbers"):
        c.inc("1", tags={"route": "/"})  # type: ignore[arg-type]
    assert c.info["default_tags"] == {"code": "200"}


def test_a_metric_sent_to_another_process_is_declared_there() -> None:
    h = Histogram("unit_pickled", boundaries=[1.0, 2.0], tag_keys=("k",)).set_default_tags(
        {"k": "v"}
    )
    again = pickle.loads(pickle.dumps(h))
    assert isinstance(again, Histogram) and again.info == h.info
    again.observe(1.5)  # default tags travelled with it


def test_process_snapshot_and_merge_rules() -> None:
    a, b = ProcessMetrics(lambda: None), ProcessMetrics(lambda: None)
    for p in (a, b):
        p.define("c", "counter", "a counter", ("k",), [])
        p.define("g", "gauge", "", (), [])
        p.define("h", "histogram", "", (), [1.0, 10.0])
    a.record("c", (("k", "x"),), 2.0)
    b.record("c", (("k", "x"),), 3.0)
    b.record("c", (("k", "y"),), 1.0)
    a.record("g", (), 5.0)
    b.record("g", (), 7.0)  # set later: wins
    for v in (0.5, 1.0, 5.0, 50.0):
        a.record("h", (), v)
    b.record("h", (), 2.0)
    merged = aggregate([a.snapshot(), b.snapshot()])
    assert merged["c"]["samples"] == [
        {"tags": {"k": "x"}, "value": 5.0},
        {"tags": {"k": "y"}, "value": 1.0},
    ]
    assert merged["g"]["samples"] == [{"tags": {}, "value": 7.0}]
    # buckets: <= 1.0 holds 0.5 and 1.0; <= 10 holds 5.0 and 2.0; +Inf holds 50.0
    assert merged["h"]["samples"] == [{"tags": {}, "buckets": [2, 2, 1], "sum": 58.5}]
    c = ProcessMetrics(lambda: None)
    c.define("c", "gauge", "", ("k",), [])  # declared differently elsewhere: left out
    c.record("c", (("k", "x"),), 100.0)
    assert aggregate([a.snapshot(), b.snapshot(), c.snapshot()])["c"] == merged["c"]


def test_flush_writes_an_owner_only_snapshot(tmp_path: Path) -> None:
    p = ProcessMetrics(lambda: str(tmp_path))
    p.define("c", "counter", "", (), [])
    p.record("c", (), 1.0)
    p.flush()
    (snap,) = (tmp_path / "metrics").glob("app-*.json")
    assert snap.stat().st_mode & 0o777 == 0o600
    assert json.loads(snap.read_text())["metrics"]["c"]["samples"] == [{"tags": {}, "value": 1.0}]


def test_exported_text_parses() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    p = ProcessMetrics(lambda: None)
    p.define("lat_s", "histogram", "latency", ("route",), [0.1, 1.0])
    p.define("done", "counter", "jobs done", (), [])
    p.record("lat_s", (("route", "/"),), 0.5)
    p.record("done", (), 4.0)
    families = aggregate([p.snapshot()])

    class Fixed:
        def collect(self):  # type: ignore[no-untyped-def]
            return [_family(name, m) for name, m in families.items()]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    parsed = {
        s.name + json.dumps(s.labels, sort_keys=True): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }
    assert parsed["done_total{}"] == 4.0
    assert parsed['lat_s_bucket{"le": "0.1", "route": "/"}'] == 0.0
    assert parsed['lat_s_bucket{"le": "1.0", "route": "/"}'] == 1.0
    assert parsed['lat_s_bucket{"le": "+Inf", "route": "/"}'] == 1.0
    assert parsed['lat_s_sum{"route": "/"}'] == 0.5


def test_scrape_config_files(tmp_path: Path) -> None:
    metrics_config.write_configs(tmp_path)
    metrics_config.write_targets(tmp_path, ["127.0.0.1:1", "127.0.0.1:2"])
    config = (tmp_path / "prometheus.yml").read_text()
    assert "file_sd_configs" in config and json.dumps(str(tmp_path / "prom_targets.json")) in config
    targets = json.loads((tmp_path / "prom_targets.json").read_text())
    assert targets[0]["targets"] == ["127.0.0.1:1", "127.0.0.1:2"]
    grafana = json.loads((tmp_path / "grafana_dashboard.json").read_text())
    assert len(grafana["panels"]) == len(metrics_config.PANELS)
    for f in ("prometheus.yml", "prom_targets.json", "grafana_dashboard.json"):
        assert (tmp_path / f).stat().st_mode & 0o777 == 0o600


def test_dashboard_reads_the_system_series() -> None:
    from rayfield.dashboard.metrics_page import sample_of

    text = "\n".join(
        [
            "# TYPE rayfield_tasks gauge",
            'rayfield_tasks{State="RUNNING"} 3.0',
            'rayfield_tasks{State="QUEUED"} 2.0',
            'rayfield_tasks{State="WAITING_FOR_DEPENDENCIES"} 1.0',
            "# TYPE rayfield_node_cpu_percent gauge",
            "rayfield_node_cpu_percent 12.5",
            "# TYPE rayfield_object_received_bytes counter",
            "rayfield_object_received_bytes_total 1024.0",
            "",
        ]
    )
    assert sample_of(text) == {
        "tasks_running": 3.0,
        "tasks_queued": 3.0,
        "cpu_percent": 12.5,
        "received": 1024.0,
    }
