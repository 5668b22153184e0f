"""Application metrics (Ray's ``ray.util.metrics``): ``Counter``, ``Gauge``, ``Histogram``.

Record them anywhere (a driver, a task, an actor); each node sums what its processes
recorded and serves it, with the node's system metrics, in Prometheus text format on
``http://127.0.0.1:<port>/metrics`` (``rayfield start --metrics-export-port``,
``rayfield.init(_metrics_export_port=...)``; the port of each node is in its
``node.json``, key ``metrics_export_address``).

Example::

    from rayfield.util.metrics import Counter, Histogram

    requests = Counter("app_requests", description="requests served", tag_keys=("route",))
    requests.set_default_tags({"route": "/"})
    requests.inc()                                 # route="/"
    requests.inc(2.0, tags={"route": "/predict"})
    latency = Histogram("app_latency_s", boundaries=[0.01, 0.1, 1.0], tag_keys=("route",))
    latency.observe(0.05, tags={"route": "/predict"})

Across processes of a node, counters and histograms add up, and a gauge shows the value
set last. Values reach the node within about 0.2 s (each process writes a snapshot into
its session's ``metrics/`` folder, owner-only).

Errors: a name that is not a Prometheus metric name, a tag key of ``tags`` that is not
among ``tag_keys``, a tag key without a value (in ``tags`` or the default tags), a
negative counter increment, histogram boundaries that are not positive and increasing,
and a name reused with another kind or other tag keys in one process all raise
``ValueError`` saying which.
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from rayfield._private import context
from rayfield._private.common.app_metrics import ProcessMetrics

__all__ = ["Counter", "Gauge", "Histogram", "Metric"]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_TAG = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_PROCESS: ProcessMetrics | None = None
_PROCESS_LOCK = threading.Lock()


def _session_of_process() -> str | None:
    logs = os.environ.get("RAYFIELD_LOGS_DIR")  # a worker: its node's session
    if logs:
        return str(Path(logs).parent)
    ctx = context.current()
    session = ctx.info.get("session_dir") if ctx is not None else None
    return str(session) if session else None


def _process_metrics() -> ProcessMetrics:
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None or _PROCESS.pid != os.getpid():  # first use, or forked
            _PROCESS = ProcessMetrics(_session_of_process)
            atexit.register(_PROCESS.flush)
        return _PROCESS


class Metric:
    """What the three kinds share: a name, a description, tag keys and default tags.

    Args:
        name: a Prometheus metric name (``[a-zA-Z_:][a-zA-Z0-9_:]*``).
        description: its help text.
        tag_keys: the names of its tags; every record gives each a value (through
            ``tags`` or the default tags).

    Raises:
        ValueError: a bad name or tag key.
        TypeError: ``tag_keys`` is a string or holds something else than strings.
    """

    kind = ""

    def __init__(
        self, name: str, description: str = "", tag_keys: Sequence[str] | None = None
    ) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"metric name {name!r} is not a Prometheus name: use letters, digits, '_' "
                "and ':', not starting with a digit"
            )
        if isinstance(tag_keys, str):
            raise TypeError(f"tag_keys must be a sequence of strings, not the string {tag_keys!r}")
        keys = tuple(tag_keys or ())
        for key in keys:
            if not isinstance(key, str):
                raise TypeError(f"tag keys are strings, not {type(key).__name__}")
            if not _TAG.fullmatch(key) or key.startswith("__"):
                raise ValueError(f"tag key {key!r} is not a Prometheus label name")
        if len(set(keys)) != len(keys):
            raise ValueError(f"tag_keys {keys} names a key twice")
        self._name = name
        self._description = description
        self._tag_keys = keys
        self._default_tags: dict[str, str] = {}
        _process_metrics().define(name, self.kind, description, keys, self._boundaries())

    def _boundaries(self) -> list[float]:
        return []

    def _arguments(self) -> dict[str, object]:
        return {"name": self._name, "description": self._description, "tag_keys": self._tag_keys}

    def __reduce__(self) -> tuple[object, ...]:
        # Sent to a task or an actor, it is declared again in the receiving process.
        return (_rebuild, (type(self), self._arguments(), self._default_tags))

    @property
    def info(self) -> dict[str, object]:
        """Name, description, tag keys and default tags (as Ray's ``Metric.info``)."""
        return {
            "name": self._name,
            "description": self._description,
            "tag_keys": self._tag_keys,
            "default_tags": dict(self._default_tags),
        }

    def set_default_tags(self, default_tags: dict[str, str]) -> Metric:
        """Tag values used when a record's ``tags`` lacks them; returns the metric.

        Raises:
            ValueError: a key that is not one of ``tag_keys``.
        """
        self._check_keys(default_tags, "default tags")
        self._default_tags = {k: str(v) for k, v in default_tags.items()}
        return self

    def _check_keys(self, tags: dict[str, str], what: str) -> None:
        unknown = sorted(set(tags) - set(self._tag_keys))
        if unknown:
            raise ValueError(
                f"{what} of metric {self._name!r} have keys {unknown} that are not among its "
                f"tag_keys {list(self._tag_keys)}"
            )

    def _tags(self, tags: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
        given = dict(tags or {})
        self._check_keys(given, "the tags")
        final = {**self._default_tags, **{k: str(v) for k, v in given.items()}}
        missing = [k for k in self._tag_keys if k not in final]
        if missing:
            raise ValueError(
                f"metric {self._name!r} needs a value for tag key(s) {missing}: pass them in "
                "tags= or set_default_tags()"
            )
        return tuple(sorted(final.items()))

    def _record(self, value: float, tags: dict[str, str] | None) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ValueError(f"metric {self._name!r} records numbers, not {value!r}")
        _process_metrics().record(self._name, self._tags(tags), float(value))


class Counter(Metric):
    """A value that only grows (Prometheus counter; exported as ``<name>_total``).

    Raises:
        ValueError: see :class:`Metric`.
    """

    kind = "counter"

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        """Add ``value`` (>= 0).

        Raises:
            ValueError: a negative value, or bad tags.
        """
        if isinstance(value, (int, float)) and value < 0:
            raise ValueError(f"counter {self._name!r} only grows: inc({value}) is negative")
        self._record(value, tags)


class Gauge(Metric):
    """A value that goes up and down (Prometheus gauge)."""

    kind = "gauge"

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        """Set the value (for these tags).

        Raises:
            ValueError: bad tags.
        """
        self._record(value, tags)


class Histogram(Metric):
    """Counts of observed values by bucket (Prometheus histogram).

    Args:
        boundaries: the buckets' upper bounds, positive and increasing (a value ``v``
            counts in the first bucket whose bound is ``>= v``; past the last, in
            ``+Inf``).

    Raises:
        ValueError: no boundaries, or not positive and increasing; see :class:`Metric`.
    """

    kind = "histogram"

    def __init__(
        self,
        name: str,
        description: str = "",
        boundaries: Sequence[float] | None = None,
        tag_keys: Sequence[str] | None = None,
    ) -> None:
        bounds = [float(b) for b in (boundaries or [])]
        if not bounds:
            raise ValueError(f"histogram {name!r} needs boundaries, e.g. [0.1, 1.0, 10.0]")
        if any(b <= 0 for b in bounds) or any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ValueError(
                f"histogram {name!r}: boundaries {bounds} must be positive and increasing"
            )
        self._bounds = bounds
        super().__init__(name, description, tag_keys)

    def _boundaries(self) -> list[float]:
        return list(self._bounds)

    def _arguments(self) -> dict[str, object]:
        return {**super()._arguments(), "boundaries": list(self._bounds)}

    @property
    def info(self) -> dict[str, object]:
        return {**super().info, "boundaries": list(self._bounds)}

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        """Count ``value`` in its bucket.

        Raises:
            ValueError: bad tags.
        """
        self._record(value, tags)


def _rebuild(
    cls: type[Metric], arguments: dict[str, object], default_tags: dict[str, str]
) -> Metric:
    metric = cls(**arguments)  # type: ignore[arg-type]
    metric._default_tags = dict(default_tags)
    return metric
