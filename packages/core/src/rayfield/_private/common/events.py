"""Task events for ``timeline()`` and the state API.

Each process appends its events as JSON lines to ``<session>/logs/events-<pid>.jsonl``
(buffered; flushed every 0.2 s and at exit). An event is one finished task or
actor call with its phases, or a ``profile()`` span:

    {"kind": "task", "name": "f", "task": hex, "actor": hex|None, "pid": 123,
     "node": "127.0.0.1", "submit": t0, "start": t1, "args": t2, "run": t3, "end": t4,
     "ok": true}

An embedded runtime (no GCS) also records each named actor when it is created, before
its constructor runs, so the state API lists it at once:

    {"kind": "actor_named", "actor": hex, "name": "counter", "namespace": "ns",
     "class_name": "Counter", "pid": 123}

Times are seconds since the epoch (``time.time()``).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

__all__ = [
    "ACTOR_NAMED",
    "EventLog",
    "actor_named",
    "is_actor_creation",
    "read_events",
    "to_chrome_trace",
]

ACTOR_NAMED = "actor_named"
"""The ``kind`` of a named actor's creation record (embedded runtime only)."""


class EventLog:
    """Buffered JSON-lines writer of this process's events: a flusher thread writes the
    buffer every 0.2 s until :meth:`close` (``shutdown()``), which writes the rest."""

    def __init__(self, logs_dir: str | os.PathLike[str]) -> None:
        self.path = Path(logs_dir) / f"events-{os.getpid()}.jsonl"
        self._buffer: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._closed = threading.Event()
        atexit.register(self.flush)
        self._flusher = threading.Thread(
            target=self._flush_periodically, daemon=True, name="rf-events"
        )
        self._flusher.start()

    def _flush_periodically(self) -> None:
        while not self._closed.wait(0.2):
            if self._buffer:
                self.flush()

    def close(self) -> None:
        """Stop the flusher thread and write what is buffered; later records are written
        by :meth:`record` itself (it flushes when the last flush is over 0.2 s old) and
        at exit."""
        self._closed.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join(timeout=2)
        self.flush()

    def record(self, event: dict[str, Any]) -> None:
        """Append ``event`` (a dict of JSON values) to the buffer; flushes when the last flush is
        over 0.2 s old."""
        with self._lock:
            self._buffer.append(event)
        if time.monotonic() - self._last_flush > 0.2:
            self.flush()

    def flush(self) -> None:
        """Append the buffered events to this process's events file now."""
        with self._lock:
            batch, self._buffer = self._buffer, []
            self._last_flush = time.monotonic()
        if batch:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as f:  # owner-only, as every file of the session
                f.write("".join(json.dumps(e) + "\n" for e in batch))


def read_events(logs_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every event written so far by the processes of a session."""
    events: list[dict[str, Any]] = []
    for path in sorted(Path(logs_dir).glob("events-*.jsonl")):
        with open(path) as f:
            for line in f:
                if line.strip():
                    try:
                        events.append(json.loads(line))
                    except json.JSONDecodeError:  # a line being written right now
                        continue
    return events


def actor_named(actor_id: bytes, name: str, namespace: str, class_name: str) -> dict[str, Any]:
    """The record of a named actor created in an embedded runtime (kind ``actor_named``)."""
    return {
        "kind": ACTOR_NAMED,
        "actor": actor_id.hex(),
        "name": name,
        "namespace": namespace,
        "class_name": class_name,
        "pid": os.getpid(),
    }


def is_actor_creation(event: dict[str, Any]) -> bool:
    """Whether ``event`` is the finished creation (``<Class>.__init__``) of an actor."""
    return (
        event.get("kind") == "task"
        and bool(event.get("actor"))
        and str(event.get("name", "")).endswith(".__init__")
    )


_PHASES = (
    ("queued", "submit", "start"),
    ("fetching arguments", "start", "args"),
    ("running", "args", "run"),
    ("storing results", "run", "end"),
)


def to_chrome_trace(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chrome tracing "X" events (load in chrome://tracing or Perfetto).

    Each task gives one event per phase on its worker's row (``tid`` = worker pid) within
    its node (``pid`` = node address); ``profile()`` spans appear as they were recorded.
    """
    trace: list[dict[str, Any]] = []
    for e in events:
        if e.get("kind") == "profile":
            extra = dict(e.get("extra") or {})
            trace.append(
                {
                    "name": extra.pop("name", e["name"]),
                    "cat": "profile",
                    "ph": "X",
                    "ts": e["start"] * 1e6,
                    "dur": max(0.0, (e["end"] - e["start"]) * 1e6),
                    "pid": e.get("node", "127.0.0.1"),
                    "tid": e["pid"],
                    "args": extra,
                    **({"cname": extra.pop("cname")} if "cname" in extra else {}),
                }
            )
            continue
        for phase, begin, end in _PHASES:
            if e.get(begin) is None or e.get(end) is None:
                continue
            trace.append(
                {
                    "name": f"{e['name']}:{phase}" if phase != "running" else e["name"],
                    "cat": "actor_call" if e.get("actor") else "task",
                    "ph": "X",
                    "ts": e[begin] * 1e6,
                    "dur": max(0.0, (e[end] - e[begin]) * 1e6),
                    "pid": e.get("node", "127.0.0.1"),
                    "tid": e["pid"],
                    "args": {
                        "task_id": e["task"],
                        "actor_id": e.get("actor"),
                        "phase": phase,
                        "ok": e.get("ok", True),
                    },
                }
            )
    return trace
