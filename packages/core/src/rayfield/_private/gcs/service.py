"""The GCS calls as plain Python: decoded request dict in, reply values out.

``GcsService`` binds each method of ``codec.METHODS`` to the tables; the gRPC
layer (``server.py``, over ``transport.serve``) only decodes, calls and
encodes. Server-side publishing
(NODE_ALIVE, NODE_DEAD, ACTOR) encodes the record as the message payload.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from rayfield._private.gcs.groups import GcsGroups
from rayfield._private.gcs.pubsub import PubSub
from rayfield._private.gcs.tables import GcsTables
from rayfield._private.protocol import codec
from rayfield._private.protocol.constants import MAX_MESSAGE_BYTES
from rayfield._private.protocol.errors import GcsInvalidRequestError
from rayfield._private.protocol.types import (
    CHANNEL_NODE_DEAD,
    ActorInfo,
    ActorState,
    JobInfo,
    NodeInfo,
)

__all__ = ["GcsService"]

_RECORD_TABLES = {NodeInfo: "GcsNodeInfo", ActorInfo: "GcsActorInfo", JobInfo: "GcsJobInfo"}
SUBSCRIBE_POLL_S = 0.5


def _required(req: dict[str, Any], field: str) -> Any:
    value = req.get(field)
    if value is None:
        raise GcsInvalidRequestError(f"the request has no {field!r}")
    return value


def _json(req: dict[str, Any]) -> dict[str, Any]:
    """A ``GcsBlob`` request's JSON object.

    Raises:
        GcsInvalidRequestError: not a JSON object.
    """
    try:
        body = json.loads(req.get("data") or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise GcsInvalidRequestError(f"the request is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise GcsInvalidRequestError("the request must be a JSON object")
    return body


# Task events the GCS keeps (the newest): its memory grows until the ring is full, by
# about 430 bytes an event in a soak (some 43 MB for a full ring).
MAX_TASK_EVENTS = 100_000


class TaskEventRing:
    """The most recent task events (opaque bytes), in memory only (not persisted)."""

    def __init__(self, max_events: int = MAX_TASK_EVENTS) -> None:
        self._lock = threading.Lock()
        self._events: collections.deque[bytes] = collections.deque(maxlen=max_events)
        self.dropped = 0

    def add(self, events: list[bytes]) -> None:
        """Append events, dropping the oldest when full."""
        with self._lock:
            ring = self._events
            assert ring.maxlen is not None
            self.dropped += max(0, len(ring) + len(events) - ring.maxlen)
            ring.extend(events)

    def last(self, limit: int, max_bytes: int) -> list[bytes]:
        """The most recent ``limit`` events (0: all kept), oldest first, at most ``max_bytes``."""
        with self._lock:
            count = len(self._events) if limit <= 0 else min(limit, len(self._events))
            out: list[bytes] = []
            size = 0
            for event in reversed(self._events):
                if len(out) == count or size + len(event) + 16 > max_bytes:
                    break
                out.append(event)
                size += len(event) + 16
            out.reverse()
            return out


class GcsService:
    """The GCS's methods over ``tables`` and ``pubsub``.

    Args:
        db_path: SQLite database of the tables.
        heartbeat_timeout_s: see ``GcsTables``.
        max_reply_bytes: replies are trimmed (task events) to fit this size.
        pubsub: the publisher; a new one when None.
    """

    def __init__(
        self,
        db_path: str,
        heartbeat_timeout_s: float = 3.0,
        max_reply_bytes: int = MAX_MESSAGE_BYTES,
        pubsub: PubSub | None = None,
    ) -> None:
        self.pubsub = pubsub or PubSub()
        self.groups: GcsGroups | None = None
        self.tables = GcsTables(db_path, self._publish_record, heartbeat_timeout_s)
        t = self.tables
        self.groups = GcsGroups(
            lambda ns, key, value: t.kv_put(ns, key, value, True),
            lambda ns: [(k, t.kv_get(ns, k) or b"") for k in t.kv_keys(ns, b"")],
            t.kv_del,
        )
        self.task_events = TaskEventRing()
        self._max_reply_bytes = max_reply_bytes

    def _publish_record(self, channel: str, key: bytes, record: Any) -> None:
        if channel == CHANNEL_NODE_DEAD and self.groups is not None:
            self.groups.node_dead(key)  # its bundles are placed again
        payload = codec.encode(_RECORD_TABLES[type(record)], record)
        self.pubsub.publish(channel, key, payload)

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """Method name -> function of the decoded request returning the reply's values."""
        return {name: getattr(self, name) for name in codec.METHODS}

    # ---- nodes ------------------------------------------------------------------------

    def RegisterNode(self, req: dict[str, Any]) -> None:
        self.tables.register_node(_required(req, "node"))

    def Heartbeat(self, req: dict[str, Any]) -> dict[str, Any]:
        t = self.tables
        idle_s = float(req.get("idle_duration_s") or 0.0)
        again = t.heartbeat(req["node_id"], req["resources_available"], req["demand"], idle_s)
        return {"reregister": again}

    def GetNodes(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.groups is not None
        return {"nodes": self.groups.overlay(self.tables.snapshot()[0])}

    def UnregisterNode(self, req: dict[str, Any]) -> None:
        self.tables.unregister_node(req["node_id"])

    # ---- key-value ------------------------------------------------------------------

    def KvPut(self, req: dict[str, Any]) -> dict[str, Any]:
        t = self.tables
        return {"added": t.kv_put(req["namespace"], req["key"], req["value"], req["overwrite"])}

    def KvGet(self, req: dict[str, Any]) -> dict[str, Any]:
        value = self.tables.kv_get(req["namespace"], req["key"])
        return {"found": value is not None, "value": value}

    def KvDel(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"deleted": self.tables.kv_del(req["namespace"], req["key"])}

    def KvKeys(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"keys": self.tables.kv_keys(req["namespace"], req["prefix"])}

    # ---- actors ----------------------------------------------------------------------

    def RegisterActor(self, req: dict[str, Any]) -> None:
        self.tables.register_actor(_required(req, "actor"))

    def UpdateActor(self, req: dict[str, Any]) -> None:
        try:
            state = ActorState(req["state"])
        except ValueError:
            raise GcsInvalidRequestError(f"unknown actor state {req['state']}") from None
        self.tables.update_actor(req["actor_id"], state, req["node_id"])

    def GetActor(self, req: dict[str, Any]) -> dict[str, Any]:
        actor = self.tables.get_actor(req["actor_id"], req["name"], req["namespace"])
        return {"found": actor is not None, "actor": actor}

    def ListActors(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"actors": self.tables.snapshot()[1]}

    # ---- object directory -----------------------------------------------------------

    def AddObjectLocations(self, req: dict[str, Any]) -> None:
        self.tables.add_object_locations(req["node_id"], req["object_ids"])

    def RemoveObjectLocations(self, req: dict[str, Any]) -> None:
        self.tables.remove_object_locations(req["node_id"], req["object_ids"])

    def GetObjectLocations(self, req: dict[str, Any]) -> dict[str, Any]:
        found = self.tables.get_object_locations(req["object_ids"])
        return {"locations": [{"object_id": k, "node_ids": v} for k, v in found.items()]}

    # ---- jobs and task events ---------------------------------------------------------

    def AddJob(self, req: dict[str, Any]) -> None:
        self.tables.add_job(_required(req, "job"))

    def MarkJobFinished(self, req: dict[str, Any]) -> None:
        self.tables.mark_job_finished(req["job_id"])
        assert self.groups is not None
        self.groups.job_finished(req["job_id"])  # its groups that are not detached end

    # ---- placement groups (JSON in GcsBlob, gcs/groups.py) ----------------------------

    def PlacementGroup(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.groups is not None
        reply = self.groups.call(_json(req), self.tables.snapshot()[0])
        return {"data": json.dumps(reply).encode()}

    def SyncBundles(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.groups is not None
        body = _json(req)
        try:
            node_id = bytes.fromhex(body["node_id"])
            answers, held = list(body["answers"]), list(body["held"])
        except (KeyError, TypeError, ValueError) as exc:
            raise GcsInvalidRequestError(f"bad bundle sync: {exc!r}") from None
        reply = self.groups.sync(node_id, answers, held, self.tables.snapshot()[0])
        return {"data": json.dumps(reply).encode()}

    def ListJobs(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"jobs": self.tables.snapshot()[2]}

    def AddTaskEvents(self, req: dict[str, Any]) -> None:
        self.task_events.add(req["events"])

    def GetTaskEvents(self, req: dict[str, Any]) -> dict[str, Any]:
        events = self.task_events.last(req["limit"], self._max_reply_bytes - 4096)
        return {"events": events, "dropped": self.task_events.dropped}

    # ---- pub/sub ---------------------------------------------------------------------

    def Publish(self, req: dict[str, Any]) -> None:
        if not req["channel"]:
            raise GcsInvalidRequestError("publish needs a non-empty channel name")
        self.pubsub.publish(req["channel"], req["key"], req["payload"])

    def Subscribe(self, req: dict[str, Any], is_active: Callable[[], bool]) -> Iterator[Any]:
        """Yield the subscription confirmation, then messages until closed or inactive.

        Raises:
            GcsTooManySubscribersError: when too many streams are open.
        """
        sub = self.pubsub.subscribe(req["channels"])
        try:
            yield {"channel": "", "key": b"", "payload": b""}
            while not sub.closed and is_active():
                message = sub.get(SUBSCRIBE_POLL_S)
                if message is not None:
                    yield message
        finally:
            self.pubsub.unsubscribe(sub)

    def close(self) -> None:
        """End every subscription and close the database."""
        self.pubsub.close_all()
        self.tables.close()
