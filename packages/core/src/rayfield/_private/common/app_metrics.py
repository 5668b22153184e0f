"""Application metrics inside one process, and their sum over a node's processes.

Every process (driver, worker) keeps the values of the metrics it recorded
(``rayfield.util.metrics``) in one :class:`ProcessMetrics`, and writes them as a JSON
snapshot to ``<session>/metrics/app-<pid>.json`` (mode 0600, atomically) at most every
:data:`FLUSH_INTERVAL_S` and at exit. The node's exporter reads every snapshot of its
session and merges them with :func:`aggregate`:

- counters and histograms: summed over processes (a process that ended keeps counting:
  its last snapshot stays);
- gauges: per tag set, the value set last (by wall-clock time) in any process.

A snapshot::

    {"pid": 12, "metrics": {NAME: {"type": "counter"|"gauge"|"histogram",
     "description": str, "tag_keys": [...], "boundaries": [...],
     "samples": [{"tags": {...}, "value": float, "time": float}            # counter, gauge
                 | {"tags": {...}, "buckets": [int, ...], "sum": float}]}}}  # histogram

Histogram ``buckets`` hold the count per bucket (not cumulative): one per boundary (values
``<=`` it) and one more for the values above the last boundary.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["FLUSH_INTERVAL_S", "ProcessMetrics", "aggregate", "metrics_dir", "read_snapshots"]

FLUSH_INTERVAL_S = 0.2
METRICS_DIR = "metrics"
SNAPSHOT_GLOB = "app-*.json"
Tags = tuple[tuple[str, str], ...]


def metrics_dir(session_dir: str | os.PathLike[str]) -> Path:
    """The folder of a session where its processes' snapshots go."""
    return Path(session_dir) / METRICS_DIR


class ProcessMetrics:
    """This process's metric values, and the writing of its snapshot.

    Args:
        session_dir: returns the session folder to write to, or None (not in a session:
            values are kept, nothing is written).
    """

    def __init__(self, session_dir: Any) -> None:
        self._session_dir = session_dir
        self._lock = threading.Lock()
        self._defs: dict[str, dict[str, Any]] = {}
        self._values: dict[str, dict[Tags, Any]] = {}
        self._last_flush = 0.0
        self._timer: threading.Timer | None = None
        self._dirty = False
        self.pid = os.getpid()

    def define(
        self,
        name: str,
        kind: str,
        description: str,
        tag_keys: tuple[str, ...],
        boundaries: list[float],
    ) -> None:
        """Declare a metric (again: it must be of the same kind and tag keys).

        Raises:
            ValueError: ``name`` was declared as another kind or with other tag keys.
        """
        with self._lock:
            known = self._defs.get(name)
            new = {
                "type": kind,
                "description": description,
                "tag_keys": list(tag_keys),
                "boundaries": list(boundaries),
            }
            if known is not None and (known["type"], known["tag_keys"]) != (kind, list(tag_keys)):
                raise ValueError(
                    f"metric {name!r} exists already as a {known['type']} with tag keys "
                    f"{known['tag_keys']}: give this one another name"
                )
            self._defs[name] = new
            self._values.setdefault(name, {})

    def record(self, name: str, tags: Tags, value: float) -> None:
        """Add ``value`` to a counter, set a gauge, or observe ``value`` in a histogram."""
        with self._lock:
            kind = self._defs[name]["type"]
            values = self._values[name]
            if kind == "counter":
                values[tags] = values.get(tags, 0.0) + value
            elif kind == "gauge":
                values[tags] = (value, time.time())
            else:
                bounds = self._defs[name]["boundaries"]
                buckets, total = values.get(tags) or ([0] * (len(bounds) + 1), 0.0)
                buckets[bisect.bisect_left(bounds, value)] += 1
                values[tags] = (buckets, total + value)
            self._dirty = True
        self._schedule()

    def value(self, name: str, tags: Tags) -> Any:
        """The recorded value (for tests): a float, a (value, time) or (buckets, sum)."""
        with self._lock:
            return self._values.get(name, {}).get(tags)

    def snapshot(self) -> dict[str, Any]:
        """The values as the JSON-ready snapshot described in the module's docstring."""
        with self._lock:
            out: dict[str, Any] = {}
            for name, d in self._defs.items():
                samples = []
                for tags, v in self._values[name].items():
                    sample: dict[str, Any] = {"tags": dict(tags)}
                    if d["type"] == "counter":
                        sample["value"] = v
                    elif d["type"] == "gauge":
                        sample["value"], sample["time"] = v
                    else:
                        sample["buckets"], sample["sum"] = list(v[0]), v[1]
                    samples.append(sample)
                out[name] = {**d, "samples": samples}
            return {"pid": os.getpid(), "metrics": out}

    def _schedule(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._timer is not None:
                return
            wait = self._last_flush + FLUSH_INTERVAL_S - now
            if wait > 0:
                self._timer = threading.Timer(wait, self.flush)
                self._timer.daemon = True
                self._timer.start()
                return
        self.flush()

    def flush(self) -> None:
        """Write the snapshot now (when something changed and there is a session)."""
        with self._lock:
            self._timer = None
            self._last_flush = time.monotonic()
            if not self._dirty:
                return
            self._dirty = False
        session = self._session_dir()
        if session is None:
            return
        from rayfield._private.common import private_files

        folder = private_files.ensure_private_dir(metrics_dir(session))
        private_files.write_text(folder / f"app-{os.getpid()}.json", json.dumps(self.snapshot()))


def aggregate(snapshots: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Merge process snapshots into one per node (rules in the module's docstring).

    Returns:
        name -> ``{"type", "description", "tag_keys", "boundaries", "samples"}`` with
        samples ``{"tags", "value"}`` (counters, gauges) or ``{"tags", "buckets", "sum"}``
        (histograms). A metric declared differently by two processes keeps the first
        declaration; the other's samples are left out.
    """
    out: dict[str, dict[str, Any]] = {}
    merged: dict[str, dict[Tags, Any]] = {}
    for snap in snapshots:
        for name, m in (snap.get("metrics") or {}).items():
            known = out.get(name)
            if known is None:
                out[name] = known = {
                    k: m[k] for k in ("type", "description", "tag_keys", "boundaries")
                }
                merged[name] = {}
            elif (known["type"], known["tag_keys"], known["boundaries"]) != (
                m["type"],
                m["tag_keys"],
                m["boundaries"],
            ):
                continue
            values = merged[name]
            for s in m["samples"]:
                tags: Tags = tuple(sorted(s["tags"].items()))
                if m["type"] == "counter":
                    values[tags] = values.get(tags, 0.0) + float(s["value"])
                elif m["type"] == "gauge":
                    if tags not in values or s["time"] >= values[tags][1]:
                        values[tags] = (float(s["value"]), float(s["time"]))
                else:
                    old = values.get(tags) or ([0] * len(s["buckets"]), 0.0)
                    values[tags] = (
                        [a + b for a, b in zip(old[0], s["buckets"])],
                        old[1] + s["sum"],
                    )
    for name, values in merged.items():
        kind = out[name]["type"]
        samples = []
        for tags, v in sorted(values.items()):
            if kind == "counter":
                samples.append({"tags": dict(tags), "value": v})
            elif kind == "gauge":
                samples.append({"tags": dict(tags), "value": v[0]})
            else:
                samples.append({"tags": dict(tags), "buckets": v[0], "sum": v[1]})
        out[name]["samples"] = samples
    return out


def read_snapshots(session_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every process snapshot of a session (files that do not parse are skipped: a
    process may be writing its first one)."""
    from rayfield._private.common import private_files

    out = []
    for path in sorted(metrics_dir(session_dir).glob(SNAPSHOT_GLOB)):
        try:
            value = json.loads(private_files.read_text(path))
        except (OSError, ValueError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
