"""The files in the head's ``<session>/metrics/`` that point Prometheus and Grafana at
the cluster.

- ``prometheus.yml``: a scrape config whose one job reads its targets from
  ``prom_targets.json`` (Prometheus file service discovery, re-read on change), so
  ``prometheus --config.file=<session>/metrics/prometheus.yml`` follows nodes as they join
  and leave;
- ``prom_targets.json``: ``[{"labels": {"job": "rayfield"}, "targets": ["HOST:PORT", ...]}]``,
  rewritten by the head's exporter when the set of alive nodes changes;
- ``grafana_dashboard.json``: a Grafana dashboard (import it) with a panel per system
  metric, over a Prometheus data source named by the variable ``datasource``.
"""

from __future__ import annotations

import json
from pathlib import Path

from rayfield._private.common import private_files

__all__ = [
    "GRAFANA_FILE",
    "PROMETHEUS_FILE",
    "TARGETS_FILE",
    "grafana_dashboard",
    "write_configs",
    "write_targets",
]

PROMETHEUS_FILE = "prometheus.yml"
TARGETS_FILE = "prom_targets.json"
GRAFANA_FILE = "grafana_dashboard.json"
SCRAPE_INTERVAL_S = 5

PANELS = [
    ("Tasks by state", 'sum by (State) (rayfield_tasks{job="rayfield"})', "short"),
    ("Actors by state", 'sum by (State) (rayfield_actors{job="rayfield"})', "short"),
    ("Object store used", 'rayfield_object_store_used_bytes{job="rayfield"}', "bytes"),
    ("Object store spilled", 'rayfield_object_store_spilled_bytes{job="rayfield"}', "bytes"),
    (
        "Scheduler queues",
        'sum by (Queue) (rayfield_scheduler_queue_length{job="rayfield"})',
        "short",
    ),
    (
        "Objects received from other nodes",
        'rate(rayfield_object_received_bytes_total{job="rayfield"}[1m])',
        "Bps",
    ),
    ("Node CPU", 'rayfield_node_cpu_percent{job="rayfield"}', "percent"),
    ("Node memory used", 'rayfield_node_memory_used_bytes{job="rayfield"}', "bytes"),
]


def prometheus_config(folder: Path) -> str:
    """The text of ``prometheus.yml`` for targets listed in ``folder``."""
    return (
        "# Written by rayfield: scrape every node of the cluster (targets: file discovery).\n"
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL_S}s\n"
        f"  evaluation_interval: {SCRAPE_INTERVAL_S}s\n"
        "scrape_configs:\n"
        "  - job_name: rayfield\n"
        "    file_sd_configs:\n"
        f"      - files: [{json.dumps(str(folder / TARGETS_FILE))}]\n"
        "        refresh_interval: 5s\n"
    )


def grafana_dashboard() -> dict[str, object]:
    """A Grafana dashboard of the system metrics (one time-series panel each)."""
    panels = []
    for i, (title, expr, unit) in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {"expr": expr, "legendFormat": "{{instance}} {{State}}{{Queue}}", "refId": "A"}
                ],
            }
        )
    return {
        "title": "rayfield cluster",
        "uid": "rayfield-cluster",
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "5s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                }
            ]
        },
        "panels": panels,
    }


def write_configs(folder: Path) -> None:
    """Write ``prometheus.yml`` and ``grafana_dashboard.json`` into ``folder`` (0600)."""
    private_files.write_text(folder / PROMETHEUS_FILE, prometheus_config(folder))
    private_files.write_text(folder / GRAFANA_FILE, json.dumps(grafana_dashboard(), indent=2))


def write_targets(folder: Path, targets: list[str]) -> None:
    """Write the file discovery targets (atomically: Prometheus never reads half a file)."""
    groups = [{"labels": {"job": "rayfield"}, "targets": list(targets)}]
    private_files.write_text(folder / TARGETS_FILE, json.dumps(groups))
