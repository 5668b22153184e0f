"""A node's ``/metrics`` endpoint: application and system metrics in Prometheus text format.

:class:`MetricsExporter` serves ``http://HOST:PORT/metrics`` (HOST loopback unless told
otherwise; PORT 0 picks a free one) with ``prometheus_client``'s HTTP server, whose
registry holds one :class:`NodeCollector`. Each scrape reads, at that moment:

- the application metrics of the node's processes (their snapshots in
  ``<session>/metrics/``, merged by ``common.app_metrics.aggregate``);
- the system metrics (names in :data:`SYSTEM_METRICS`): tasks on this node by state,
  actors hosted here by state (in a cluster, from the GCS's actor table), object store
  bytes used, capacity and spilled, objects, scheduler queue lengths, bytes of objects
  received from other nodes, worker processes, and the machine's CPU and memory (psutil).

In a cluster the exporter puts its address in the GCS key-value table (namespace
:data:`KV_NAMESPACE`, key the node id in hex) and refreshes it every few seconds; the
head's exporter writes the Prometheus file service discovery targets of every alive
node's exporter (``metrics/prom_targets.json``) next to ``prometheus.yml`` and the Grafana
dashboard (``metrics_config.py``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psutil

from rayfield._private.common import private_files
from rayfield._private.common.app_metrics import aggregate, metrics_dir, read_snapshots
from rayfield._private.node_manager import metrics_config

__all__ = ["KV_NAMESPACE", "SYSTEM_METRICS", "MetricsExporter", "NodeCollector"]

logger = logging.getLogger("rayfield")
KV_NAMESPACE = "metrics"
REFRESH_S = 2.0
SYSTEM_METRICS = {
    "rayfield_tasks": "tasks on this node by State (RUNNING, QUEUED, WAITING_FOR_DEPENDENCIES, "
    "INFEASIBLE)",
    "rayfield_actors": "actors hosted by this node by State (cluster nodes only)",
    "rayfield_object_store_used_bytes": "bytes of the object store in use",
    "rayfield_object_store_capacity_bytes": "bytes of the object store",
    "rayfield_object_store_spilled_bytes": "bytes of objects spilled to disk",
    "rayfield_object_store_objects": "objects in the store",
    "rayfield_scheduler_queue_length": "tasks waiting in the node's scheduler by Queue",
    "rayfield_object_received_bytes": "bytes of objects received from other nodes (counter)",
    "rayfield_node_workers": "worker processes of this node",
    "rayfield_node_cpu_percent": "the machine's CPU use, percent of all cores",
    "rayfield_node_cpu_count": "the machine's logical CPUs",
    "rayfield_node_memory_used_bytes": "the machine's memory in use (total less available)",
    "rayfield_node_memory_total_bytes": "the machine's memory",
}


class NodeCollector:
    """The ``prometheus_client`` collector of one node (see the module's docstring)."""

    def __init__(self, node: Any, gcs: Any = None) -> None:
        self.node = node
        self.gcs = gcs
        psutil.cpu_percent(interval=None)  # the first call starts the measurement

    def collect(self) -> Iterator[Any]:
        system: list[Any] = []
        try:
            system = list(self._system())
        except Exception as exc:  # a scrape shows what it can
            logger.debug("system metrics failed: %s", exc)
        yield from system
        names = {f.name for f in system}
        families = aggregate(read_snapshots(self.node.session_dir))
        for name, m in families.items():
            if name in names or name in SYSTEM_METRICS:
                continue
            yield _family(name, m)

    def _system(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def gauge(name: str, value: float, labels: dict[str, str] | None = None) -> Any:
            family = GaugeMetricFamily(name, SYSTEM_METRICS[name], labels=list(labels or {}))
            family.add_metric(list((labels or {}).values()), value)
            return family

        server = self.node.server
        snap = server.scheduler_snapshot()
        stats = server.stats()
        running = server.running_tasks()
        queued = sum(n for _, n in snap["ready_by_shape"])
        waiting = snap["waiting_for_dependencies"]
        infeasible = len(snap["infeasible"])
        tasks = GaugeMetricFamily(
            "rayfield_tasks", SYSTEM_METRICS["rayfield_tasks"], labels=["State"]
        )
        for state, n in (
            ("RUNNING", len(running)),
            ("QUEUED", queued),
            ("WAITING_FOR_DEPENDENCIES", waiting),
            ("INFEASIBLE", infeasible),
        ):
            tasks.add_metric([state], n)
        yield tasks
        queues = GaugeMetricFamily(
            "rayfield_scheduler_queue_length",
            SYSTEM_METRICS["rayfield_scheduler_queue_length"],
            labels=["Queue"],
        )
        for queue, n in (
            ("ready", queued),
            ("waiting_for_dependencies", waiting),
            ("infeasible", infeasible),
            ("actor_tasks", snap.get("actor_tasks_queued", 0)),
        ):
            queues.add_metric([queue], n)
        yield queues
        if self.gcs is not None:
            yield self._actors()
        yield gauge("rayfield_object_store_used_bytes", stats["used_bytes"])
        yield gauge("rayfield_object_store_capacity_bytes", stats["capacity_bytes"])
        yield gauge("rayfield_object_store_spilled_bytes", stats.get("spilled_bytes", 0))
        yield gauge("rayfield_object_store_objects", stats["num_objects"])
        received = CounterMetricFamily(
            "rayfield_object_received_bytes", SYSTEM_METRICS["rayfield_object_received_bytes"]
        )
        agent = getattr(self.node, "agent", None)
        received.add_metric([], getattr(getattr(agent, "objects", None), "bytes_received", 0))
        yield received
        with self.node.pool.lock:
            workers = sum(1 for p in self.node.pool.procs.values() if p.poll() is None)
        yield gauge("rayfield_node_workers", workers)
        mem = psutil.virtual_memory()
        yield gauge("rayfield_node_cpu_percent", psutil.cpu_percent(interval=None))
        yield gauge("rayfield_node_cpu_count", psutil.cpu_count() or 1)
        yield gauge("rayfield_node_memory_used_bytes", mem.total - mem.available)
        yield gauge("rayfield_node_memory_total_bytes", mem.total)

    def _actors(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        me = bytes.fromhex(self.node.server.node_id.hex())
        counts: dict[str, int] = {}
        for actor in self.gcs.list_actors():
            if actor.node_id == me:
                state = actor.state.name
                counts[state] = counts.get(state, 0) + 1
        family = GaugeMetricFamily(
            "rayfield_actors", SYSTEM_METRICS["rayfield_actors"], labels=["State"]
        )
        for state in ("PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"):
            family.add_metric([state], counts.get(state, 0))
        return family


def _family(name: str, m: dict[str, Any]) -> Any:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    keys = list(m["tag_keys"])
    description = m["description"] or name
    if m["type"] == "histogram":
        histogram = HistogramMetricFamily(name, description, labels=keys)
        for s in m["samples"]:
            cumulative, buckets = 0, list[tuple[str, float]]()
            for bound, count in zip([*m["boundaries"], float("inf")], s["buckets"]):
                cumulative += count
                buckets.append(
                    ("+Inf" if bound == float("inf") else repr(float(bound)), cumulative)
                )
            histogram.add_metric([s["tags"].get(k, "") for k in keys], buckets, s["sum"])
        return histogram
    cls = CounterMetricFamily if m["type"] == "counter" else GaugeMetricFamily
    family: CounterMetricFamily | GaugeMetricFamily = cls(name, description, labels=keys)
    for s in m["samples"]:
        family.add_metric([s["tags"].get(k, "") for k in keys], s["value"])
    return family


class _Server(ThreadingMixIn, WSGIServer):
    """``prometheus_client``'s WSGI app served a request per thread (IPv4)."""

    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # no line per scrape
        pass


class MetricsExporter:
    """Serves one node's ``/metrics`` (see the module's docstring).

    Args:
        node: the node.
        host: the address to listen on (``127.0.0.1`` unless told otherwise).
        port: the TCP port (0: a free one).
        gcs: the cluster's GCS client (None: a node alone).
        head: whether this is the head (it writes the scrape targets of every node).

    Raises:
        OSError: the port cannot be bound (the message names it).
    """

    def __init__(
        self, node: Any, host: str = "127.0.0.1", port: int = 0, gcs: Any = None, head: bool = True
    ) -> None:
        from prometheus_client import CollectorRegistry, make_wsgi_app

        self.node = node
        self.gcs = gcs
        self.head = head
        registry = CollectorRegistry(auto_describe=False)
        registry.register(NodeCollector(node, gcs))
        try:
            self._server = make_server(host, port, make_wsgi_app(registry), _Server, _Quiet)
        except OSError as exc:
            raise OSError(
                exc.errno, f"the metrics exporter cannot listen on {host}:{port}: {exc.strerror}"
            ) from None
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() returns within 50 ms
            name="rayfield-metrics-http",
            daemon=True,
        )
        self._thread.start()
        shown = host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        self.address = f"{shown}:{self._server.server_port}"
        self.folder = private_files.ensure_private_dir(metrics_dir(node.session_dir))
        self._stop = threading.Event()
        self._targets: list[str] = []
        if head:
            metrics_config.write_configs(self.folder)
        self._refresh_quietly()
        self._refresher = threading.Thread(target=self._loop, name="rayfield-metrics", daemon=True)
        self._refresher.start()

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self._refresh_quietly()

    def _refresh_quietly(self) -> None:
        try:
            self._refresh()
        except Exception as exc:  # the GCS may be away for a while: next time
            logger.debug("metrics registration failed: %s", exc)

    def _refresh(self) -> None:
        targets = [self.address]
        if self.gcs is not None:
            node_id = self.node.server.node_id.hex()
            self.gcs.kv_put(KV_NAMESPACE, node_id, self.address.encode())
            if self.head:
                alive = {n.node_id.hex() for n in self.gcs.get_nodes() if n.alive}
                targets = sorted(
                    {
                        (self.gcs.kv_get(KV_NAMESPACE, key) or b"").decode()
                        for key in self.gcs.kv_keys(KV_NAMESPACE)
                        if key.decode() in alive
                    }
                    - {""}
                )
        if self.head and targets != self._targets:
            self._targets = targets
            metrics_config.write_targets(self.folder, targets)

    def stop(self) -> None:
        """Stop serving (and the refresh thread)."""
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._refresher.join(timeout=0.5)  # (a daemon: a GCS call may hold it longer)
        self._thread.join(timeout=2)


def read_targets(folder: Path) -> list[str]:
    """The scrape targets the head wrote (for tests and tools)."""
    value = json.loads(private_files.read_text(folder / metrics_config.TARGETS_FILE))
    return [t for group in value for t in group["targets"]]
