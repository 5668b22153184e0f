"""The dashboard's Metrics tab: the cluster's system metrics over the last hour.

:class:`MetricsHistory` scrapes every alive node's ``/metrics`` (addresses from the GCS
key-value table, namespace ``metrics``, where each node's exporter puts its own) every
:data:`INTERVAL_S` seconds on a thread of its own, parses the text with
``prometheus_client``'s parser and keeps the last :data:`WINDOW_S` seconds of the series in
:data:`SERIES` per node. :func:`metrics_page` makes the tab (a :class:`DashboardPage`
whose script, ``metrics_page.js``, draws one SVG chart per series with a line per node and
redraws every second).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Mapping
from importlib import resources
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from rayfield.dashboard.pages import DashboardPage
from rayfield.util.state import StateClient

__all__ = ["INTERVAL_S", "SERIES", "WINDOW_S", "MetricsHistory", "metrics_page", "sample_of"]

log = logging.getLogger("rayfield.dashboard")
INTERVAL_S = 5.0
WINDOW_S = 3600.0
SCRAPE_TIMEOUT_S = 3.0
KV_NAMESPACE = "metrics"
SERIES = {
    "cpu_percent": ("Node CPU", "percent"),
    "memory_used": ("Node memory used", "bytes"),
    "store_used": ("Object store used", "bytes"),
    "store_spilled": ("Object store spilled", "bytes"),
    "tasks_running": ("Tasks running", "count"),
    "tasks_queued": ("Tasks queued or waiting", "count"),
    "actors_alive": ("Actors alive", "count"),
    "received_per_s": ("Objects received from other nodes", "bytes/s"),
}


def sample_of(text: str) -> dict[str, float]:
    """The :data:`SERIES` values (``received_per_s`` as the raw counter ``received``) in
    one node's ``/metrics`` text."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            state = s.labels.get("State")
            if s.name == "rayfield_node_cpu_percent":
                values["cpu_percent"] = s.value
            elif s.name == "rayfield_node_memory_used_bytes":
                values["memory_used"] = s.value
            elif s.name == "rayfield_object_store_used_bytes":
                values["store_used"] = s.value
            elif s.name == "rayfield_object_store_spilled_bytes":
                values["store_spilled"] = s.value
            elif s.name == "rayfield_tasks" and state == "RUNNING":
                values["tasks_running"] = s.value
            elif s.name == "rayfield_tasks" and state in ("QUEUED", "WAITING_FOR_DEPENDENCIES"):
                values["tasks_queued"] = values.get("tasks_queued", 0.0) + s.value
            elif s.name == "rayfield_actors" and state == "ALIVE":
                values["actors_alive"] = s.value
            elif s.name == "rayfield_object_received_bytes_total":
                values["received"] = s.value
    return values


class MetricsHistory:
    """The last hour of every node's system metrics, sampled on a thread.

    Args:
        client: the dashboard's state client (alive nodes, the GCS key-value table).
        interval_s: seconds between samples.
        window_s: how much history is kept.
    """

    def __init__(
        self, client: StateClient, interval_s: float = INTERVAL_S, window_s: float = WINDOW_S
    ) -> None:
        self.client = client
        self.interval_s = interval_s
        self._maxlen = int(window_s / interval_s) + 1
        self._lock = threading.Lock()
        self._points: dict[str, deque[tuple[float, dict[str, float]]]] = {}
        self._names: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rf-metrics-history", daemon=True)

    def start(self) -> MetricsHistory:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=SCRAPE_TIMEOUT_S + 1)

    def _loop(self) -> None:
        while True:
            try:
                self.sample()
            except Exception as exc:  # the GCS may be away: try again next time
                log.debug("sampling the nodes' metrics failed: %s", exc)
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        """Scrape every alive node once (a node that does not answer is left out)."""
        alive = {n["node_id"]: n["address"] for n in self.client.node_records() if n.get("alive")}
        now = time.time()
        for node_id, address in alive.items():
            target = self.client.kv_get(KV_NAMESPACE, node_id)
            if not target:
                continue
            try:
                url = f"http://{target.decode()}/metrics"
                with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as reply:
                    values = sample_of(reply.read().decode())
            except (OSError, ValueError) as exc:
                log.debug("scraping %s failed: %s", address, exc)
                continue
            with self._lock:
                self._names[node_id] = address
                points = self._points.setdefault(node_id, deque(maxlen=self._maxlen))
                if points and "received" in values and "received" in points[-1][1]:
                    t0, last = points[-1]
                    rate = (values["received"] - last["received"]) / max(now - t0, 1e-9)
                    values["received_per_s"] = max(rate, 0.0)
                points.append((now, values))

    def data(self, client: Any = None, query: Mapping[str, str] | None = None) -> dict[str, Any]:
        """``{"now", "window_s", "interval_s", "series": [{"name", "title", "unit",
        "nodes": [{"node", "points": [[t, v], ...]}]}]}`` (times in epoch seconds)."""
        with self._lock:
            copies = {n: list(p) for n, p in self._points.items()}
            names = dict(self._names)
        series = []
        for key, (title, unit) in SERIES.items():
            nodes = []
            for node_id, points in sorted(copies.items(), key=lambda kv: names[kv[0]]):
                line = [[round(t, 3), v[key]] for t, v in points if key in v]
                nodes.append({"node": names[node_id], "node_id": node_id, "points": line})
            series.append({"name": key, "title": title, "unit": unit, "nodes": nodes})
        return {
            "now": time.time(),
            "window_s": self._maxlen * self.interval_s,
            "interval_s": self.interval_s,
            "series": series,
        }


def metrics_page(history: MetricsHistory) -> DashboardPage:
    """The Metrics tab over ``history``."""
    script = resources.files("rayfield.dashboard").joinpath("metrics_page.js").read_text()
    return DashboardPage("metrics", "Metrics", script, history.data)
