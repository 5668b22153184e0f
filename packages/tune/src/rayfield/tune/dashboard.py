"""Trial summaries for the dashboard's Tune page, published by the driver in the GCS.

When the driver belongs to a cluster (``rayfield.init(address=...)``), ``tune.run``
adds a :class:`DashboardPublisher`. It keeps, per experiment, the state of the trials
and each trial's metric against time, and writes them to the cluster's key-value store
(:mod:`rayfield.experimental.internal_kv`, namespace :data:`KV_NAMESPACE`) where the
dashboard process reads them (:mod:`rayfield.tune.dashboard_page`):

* ``index/<id>``: a small JSON record (name, state counts, updated time) per experiment;
* ``experiment/<id>``: the record the page draws: the counts of every state, the best
  trial, and up to :data:`MAX_TRIALS` trials (those not finished first, then the most
  recently finished) with up to :data:`MAX_POINTS` ``[seconds since the experiment
  started, metric]`` points each (older points are thinned by half when a trial has
  more), at most :data:`MAX_BYTES` in all (the oldest finished trials are dropped to fit).

``<id>`` is the start time in milliseconds and the driver's pid, so keys sort by age;
a new experiment deletes the records of all but the newest :data:`MAX_EXPERIMENTS`.
Writes happen at most once per ``interval_s`` (and once at the end), on the driver's
loop; a failed write is logged and the experiment goes on.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from rayfield.tune import result as R
from rayfield.tune.callback import Callback
from rayfield.tune.trial import Trial

__all__ = ["KV_NAMESPACE", "DashboardPublisher", "pick_metric"]

KV_NAMESPACE = "tune"
INDEX_PREFIX = "index/"
RECORD_PREFIX = "experiment/"
MAX_TRIALS = 200
MAX_POINTS = 100
MAX_BYTES = 512 << 10
MAX_EXPERIMENTS = 20
CONFIG_CHARS = 160
# Result fields that count or time the run rather than measure the model.
_BOOKKEEPING = R.AUTO_FIELDS | {
    R.TRAINING_ITERATION,
    R.TIME_THIS_ITER_S,
    R.TIME_TOTAL_S,
    R.TIME_SINCE_RESTORE,
    R.TIMESTEPS_THIS_ITER,
    R.TIMESTEPS_TOTAL,
    R.TIMESTEPS_SINCE_RESTORE,
    R.ITERATIONS_SINCE_RESTORE,
    R.EPISODES_THIS_ITER,
    R.EPISODES_TOTAL,
    R.SHOULD_CHECKPOINT,
    R.TUNE_OVERHEAD_S,
}

log = logging.getLogger(__name__)
Store = Callable[[str, bytes | None], None]  # (key, value or None to delete)


def pick_metric(result: dict[str, Any]) -> str | None:
    """The first finite number of ``result`` that is a metric (not a counter, time or
    auto-filled field), or None when it has none."""
    for key, value in result.items():
        if key in _BOOKKEEPING or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            return key
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class DashboardPublisher(Callback):
    """Publishes the experiment's trials for the dashboard (see the module docstring).

    Args:
        name: the experiment's name, shown on the page.
        path: the experiment's directory, shown on the page.
        metric: the metric drawn; None: the first metric of the first result
            (:func:`pick_metric`).
        mode: ``"min"`` or ``"max"`` (picks the best trial), None: not shown.
        interval_s: the least time between two writes (seconds).
        store: ``store(key, value)`` writes ``value`` (bytes) under ``key`` of
            :data:`KV_NAMESPACE`, or deletes it when ``value`` is None; None: the
            cluster's key-value store. ``keys(prefix)`` lists them.
        keys: lists the keys under a prefix (with ``store``).
        clock: wall-clock seconds (for tests).
    """

    def __init__(
        self,
        name: str,
        path: str,
        metric: str | None = None,
        mode: str | None = None,
        interval_s: float = 1.0,
        store: Store | None = None,
        keys: Callable[[str], list[bytes]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name, self.path, self.metric, self.mode = name, path, metric, mode
        self.interval_s = interval_s
        self._store = store or _kv_store
        self._keys = keys or _kv_keys
        self._clock = clock
        self.started_s = clock()
        self.id = f"{int(self.started_s * 1000):015d}-{os.getpid()}"
        self._trials: dict[str, Trial] = {}
        self._points: dict[str, list[list[float]]] = {}
        self._finished: deque[str] = deque()
        self._last_write = -math.inf
        self._dirty = True
        self._failed = False
        self._ended = False
        self.writes = 0
        self._prune()

    # ---- Callback ---------------------------------------------------------------------

    def on_trial_add(self, trial: Trial) -> None:
        self._trials[trial.trial_id] = trial
        self._changed()

    def on_trial_start(self, trial: Trial) -> None:
        self._changed()

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> None:
        if self.metric is None:
            self.metric = pick_metric(result)
        value = _number(result.get(self.metric)) if self.metric else None
        if value is not None:
            points = self._points.setdefault(trial.trial_id, [])
            points.append([round(self._clock() - self.started_s, 3), value])
            if len(points) > MAX_POINTS:
                del points[1::2]  # halve: keep every other point, the first included
        self._changed()

    def on_trial_error(self, trial: Trial, error: str) -> None:
        self._changed()

    def on_trial_complete(self, trial: Trial) -> None:
        self._finished.append(trial.trial_id)
        while len(self._finished) > MAX_TRIALS:  # its points will not be shown again
            self._points.pop(self._finished.popleft(), None)
        self._changed()

    def on_experiment_end(self, trials: list[Trial]) -> None:
        self._ended = True
        self.publish()

    # ---- publishing -------------------------------------------------------------------

    def _changed(self) -> None:
        self._dirty = True
        if self._clock() - self._last_write >= self.interval_s:
            self.publish()

    def record(self) -> dict[str, Any]:
        """What ``experiment/<id>`` holds now (a JSON-able dict, under MAX_BYTES)."""
        counts = Counter(t.status for t in self._trials.values())
        running = [t for t in self._trials.values() if not t.is_finished()]
        by_id = self._trials
        finished = [by_id[i] for i in reversed(self._finished) if i in by_id]
        shown = (running + finished)[:MAX_TRIALS]
        record = {
            "id": self.id,
            "name": self.name,
            "path": self.path,
            "metric": self.metric,
            "mode": self.mode,
            "started_s": self.started_s,
            "updated_s": self._clock(),
            "finished": self._ended,
            "counts": dict(counts),
            "total": len(self._trials),
            "best": self._best(),
            "trials": [self._trial(t) for t in shown],
        }
        return record

    def _trial(self, trial: Trial) -> dict[str, Any]:
        last = trial.last_result
        config = json.dumps(trial.evaluated_params or trial.config, default=str)
        return {
            "id": trial.trial_id,
            "name": str(trial),
            "status": trial.status,
            "iteration": last.get(R.TRAINING_ITERATION),
            "value": _number(last.get(self.metric)) if self.metric else None,
            "config": config[:CONFIG_CHARS],
            "error": (trial.error_msg or "")[:CONFIG_CHARS],
            "points": self._points.get(trial.trial_id, []),
        }

    def _best(self) -> dict[str, Any] | None:
        if self.metric is None or self.mode not in ("min", "max"):
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        best: tuple[float, Trial] | None = None
        for trial in self._trials.values():
            value = _number(trial.last_result.get(self.metric))
            if value is not None and (best is None or sign * value > sign * best[0]):
                best = (value, trial)
        return None if best is None else {"name": str(best[1]), "value": best[0]}

    def publish(self) -> None:
        """Write the record and the index entry now (a failure is logged, not raised)."""
        if not self._dirty and not self._ended:
            return
        record = self.record()
        data = json.dumps(record, default=str).encode()
        while len(data) > MAX_BYTES and record["trials"]:
            record["trials"] = record["trials"][: len(record["trials"]) // 2]
            data = json.dumps(record, default=str).encode()
        index = {k: record[k] for k in ("id", "name", "updated_s", "finished", "counts", "total")}
        self._last_write = self._clock()
        self._dirty = False
        try:
            self._store(RECORD_PREFIX + self.id, data)
            self._store(INDEX_PREFIX + self.id, json.dumps(index).encode())
        except Exception as exc:  # the page is a view: the experiment must go on
            if not self._failed:
                log.warning("could not publish the trials for the dashboard: %s", exc)
            self._failed = True
            return
        self.writes += 1

    def _prune(self) -> None:
        """Delete all but the newest MAX_EXPERIMENTS - 1 experiments' records."""
        try:
            old = sorted(k.decode()[len(INDEX_PREFIX) :] for k in self._keys(INDEX_PREFIX))
            for exp_id in old[: max(0, len(old) - (MAX_EXPERIMENTS - 1))]:
                self._store(INDEX_PREFIX + exp_id, None)
                self._store(RECORD_PREFIX + exp_id, None)
        except Exception as exc:
            log.warning("could not remove old experiments from the dashboard: %s", exc)


def _kv_store(key: str, value: bytes | None) -> None:
    from rayfield.experimental import internal_kv as kv

    if value is None:
        kv._internal_kv_del(key, namespace=KV_NAMESPACE)
    else:
        kv._internal_kv_put(key, value, namespace=KV_NAMESPACE)


def _kv_keys(prefix: str) -> list[bytes]:
    from rayfield.experimental import internal_kv as kv

    return kv._internal_kv_list(prefix, namespace=KV_NAMESPACE)


def enabled() -> bool:
    """Whether this driver belongs to a cluster whose GCS can hold the summaries."""
    from rayfield.experimental import internal_kv as kv

    return kv._internal_kv_initialized()
