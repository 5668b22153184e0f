"""Sends a node's task events to the GCS, so that the cluster's timeline is in one place.

Every process on a node appends its finished tasks, actor calls and ``profile()`` spans
to ``<session>/logs/events-<pid>.jsonl`` (``rayfield._private.common.events``). The node's
``EventShipper`` tails those files every ``interval_s``, stamps each event with the
node (``node`` = the node's gRPC address, ``node_id`` = its hex id) and sends complete
lines to the GCS (``AddTaskEvents``) in batches. A batch the GCS did not take is sent
again on the next round: offsets advance only after a successful call. The GCS keeps
the most recent events (a bounded ring) for ``rayfield timeline``, ``rayfield list
tasks`` and the dashboard.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from rayfield._private.gcs.client import GcsClient
from rayfield._private.protocol.errors import GcsError

logger = logging.getLogger("rayfield")

MAX_BATCH_EVENTS = 2000
MAX_READ_BYTES = 4 << 20  # per file and round


class EventShipper:
    """Tails ``logs_dir/events-*.jsonl`` and sends new events to ``gcs``."""

    def __init__(
        self,
        logs_dir: Path,
        gcs: GcsClient,
        node_address: str,
        node_id: bytes,
        interval_s: float = 0.5,
    ) -> None:
        self.logs_dir = Path(logs_dir)
        self.gcs = gcs.with_limits(gcs.timeout_s, retry_deadline_s=0.0)  # next round retries
        self.stamp = {"node": node_address, "node_id": node_id.hex()}
        self._stamp_text = json.dumps(self.stamp, separators=(",", ":")).encode()[1:-1]
        self.interval_s = interval_s
        self.offsets: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rayfield-events")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ship what is left, then stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.ship_once()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.ship_once()

    def _read_new(self) -> list[tuple[Path, int, list[bytes]]]:
        """(file, new offset, encoded events) for each file with complete new lines."""
        out = []
        for path in sorted(self.logs_dir.glob("events-*.jsonl")):
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read(MAX_READ_BYTES)
            except OSError:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            events = []
            for line in data[: end + 1].splitlines():
                event = self._stamped(line)
                if event is not None:
                    events.append(event)
            out.append((path, start + end + 1, events))
        return out

    def _stamped(self, line: bytes) -> bytes | None:
        line = line.strip()
        if not line:
            return None
        if line[:1] == b"{" and line[-1:] == b"}":
            # A worker's event (a JSON object): the stamp is added to its text, without
            # decoding it (a few microseconds, not tens). It goes last, so where the
            # worker wrote a key of it too ("node": its IP), readers take the stamp's
            # value (JSON decoders keep the last of a repeated key).
            return line[:-1] + (b"," if line != b"{}" else b"") + self._stamp_text + b"}"
        try:
            event: dict[str, Any] = json.loads(line)
        except ValueError:
            logger.debug("skipped an unreadable task event line: %r", line[:200])
            return None
        if not isinstance(event, dict):
            return None
        event.update(self.stamp)
        return json.dumps(event, separators=(",", ":")).encode()

    def ship_once(self) -> int:
        """Send every complete new event; returns how many were sent."""
        sent = 0
        for path, offset, events in self._read_new():
            try:
                for i in range(0, len(events), MAX_BATCH_EVENTS):
                    self.gcs.add_task_events(events[i : i + MAX_BATCH_EVENTS])
            except GcsError as exc:
                logger.debug("task events not sent (will retry): %s", exc)
                return sent  # this file's offset stays: the batch goes again next round
            self.offsets[path] = offset
            sent += len(events)
        return sent
