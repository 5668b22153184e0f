"""The GCS tables: in-memory views with write-through persistence to SQLite.

Nodes, actors, jobs and object locations are held in memory and written to
SQLite (WAL mode, ``synchronous=NORMAL``: durable when the process is killed)
on every change; the key-value table lives in SQLite only. Heartbeats update
memory only (liveness is not worth a disk write per second per node).

A GCS reopened on the same database recovers every table; nodes recorded as
alive get a fresh heartbeat deadline, so they have one heartbeat timeout to
reappear before they are declared dead.

Records are stored as JSON (bytes as ``{"__b": hex}``): nothing is unpickled.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rayfield._private.protocol.errors import (
    GcsAlreadyExistsError,
    GcsInvalidRequestError,
    GcsNotFoundError,
)
from rayfield._private.protocol.types import (
    CHANNEL_ACTOR,
    CHANNEL_NODE_ALIVE,
    CHANNEL_NODE_DEAD,
    ActorInfo,
    ActorState,
    JobInfo,
    NodeInfo,
    ResourceDemand,
)

__all__ = ["GcsTables"]

MAX_ID_BYTES = 64
SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (node_id BLOB PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS actors (actor_id BLOB PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (job_id BLOB PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kv (
  namespace TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (namespace, key));
CREATE TABLE IF NOT EXISTS object_locations (
  object_id BLOB NOT NULL, node_id BLOB NOT NULL, PRIMARY KEY (object_id, node_id));
"""

Publish = Callable[[str, bytes, Any], None]


def _dump(record: Any) -> str:
    return json.dumps(dataclasses.asdict(record), default=lambda b: {"__b": bytes(b).hex()})


def _load(cls: Any, text: str) -> Any:
    def hook(d: dict[str, Any]) -> Any:
        return bytes.fromhex(d["__b"]) if d.keys() == {"__b"} else d

    fields = json.loads(text, object_hook=hook)
    if cls is NodeInfo:
        fields["demand"] = [ResourceDemand(**d) for d in fields["demand"]]
    return cls(**fields)


def _check_id(what: str, value: bytes, allow_empty: bool = False) -> bytes:
    if not isinstance(value, bytes) or len(value) > MAX_ID_BYTES:
        raise GcsInvalidRequestError(f"{what} must be at most {MAX_ID_BYTES} bytes")
    if not value and not allow_empty:
        raise GcsInvalidRequestError(f"{what} is empty: every record needs an id")
    return value


class GcsTables:
    """Every table of the GCS; thread-safe (one lock).

    Args:
        db_path: SQLite file (created if missing); ``":memory:"`` persists nothing.
        publish: called as ``publish(channel, key, record)`` after each change
            that subscribers see (node alive/dead, actor updates), lock held.
        heartbeat_timeout_s: a node silent for longer is declared dead by
            ``check_heartbeats``.
        clock: monotonic clock, in seconds (tests may pass their own).
    """

    def __init__(
        self,
        db_path: str,
        publish: Publish,
        heartbeat_timeout_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.RLock()
        self._publish = publish
        self._timeout_s = heartbeat_timeout_s
        self._clock = clock
        if db_path != ":memory:" and not os.path.exists(db_path):
            os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT, 0o600))  # owner only
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;" + SCHEMA)
        self.nodes: dict[bytes, NodeInfo] = {}
        self._last_seen: dict[bytes, float] = {}
        self.actors: dict[bytes, ActorInfo] = {}
        self.jobs: dict[bytes, JobInfo] = {}
        self._locations: dict[bytes, set[bytes]] = collections.defaultdict(set)
        self._load()

    def _load(self) -> None:
        now = self._clock()
        for (text,) in self._db.execute("SELECT record FROM nodes"):
            node = _load(NodeInfo, text)
            self.nodes[node.node_id] = node
            if node.alive:
                self._last_seen[node.node_id] = now  # one timeout to reappear
        actors = [_load(ActorInfo, t) for (t,) in self._db.execute("SELECT record FROM actors")]
        self.actors = {a.actor_id: a for a in actors}
        jobs = [_load(JobInfo, t) for (t,) in self._db.execute("SELECT record FROM jobs")]
        self.jobs = {j.job_id: j for j in jobs}
        for oid, nid in self._db.execute("SELECT object_id, node_id FROM object_locations"):
            self._locations[oid].add(nid)

    def close(self) -> None:
        """Close the database; the tables must not be used afterwards."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _save(self, table: str, key_column: str, key: bytes, record: Any) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO {table} ({key_column}, record) VALUES (?, ?)",
            (key, _dump(record)),
        )

    # ---- nodes ------------------------------------------------------------------

    def register_node(self, node: NodeInfo) -> None:
        """Record ``node`` as alive (again) and publish NODE_ALIVE.

        Raises:
            GcsInvalidRequestError: when the node id is empty or too long.
        """
        _check_id("node_id", node.node_id)
        with self._lock:
            node.alive, node.death_reason = True, ""
            node.registered_s = node.last_heartbeat_s = time.time()
            node.idle_duration_s = 0.0  # until its first heartbeat says otherwise
            if not node.resources_available:
                node.resources_available = dict(node.resources_total)
            self.nodes[node.node_id] = node
            self._last_seen[node.node_id] = self._clock()
            self._save("nodes", "node_id", node.node_id, node)
            self._publish(CHANNEL_NODE_ALIVE, node.node_id, node)

    def heartbeat(
        self,
        node_id: bytes,
        available: dict[str, float],
        demand: list[ResourceDemand],
        idle_duration_s: float = 0.0,
    ) -> bool:
        """Record a heartbeat (free resources, pending demand, seconds idle); return True
        when the node must register (again).

        A node that the GCS does not know, or has declared dead, must register.
        """
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or not node.alive:
                return True
            node.resources_available, node.demand = available, demand
            node.idle_duration_s = max(0.0, idle_duration_s)
            node.last_heartbeat_s = time.time()
            self._last_seen[node_id] = self._clock()
            return False

    def snapshot(self) -> tuple[list[NodeInfo], list[ActorInfo], list[JobInfo]]:
        """Lists of every node, actor and job (records shared, lists copied)."""
        with self._lock:
            return list(self.nodes.values()), list(self.actors.values()), list(self.jobs.values())

    def unregister_node(self, node_id: bytes) -> None:
        """Declare a node dead at its own request (a clean stop).

        Raises:
            GcsNotFoundError: when the node was never registered.
        """
        with self._lock:
            if node_id not in self.nodes:
                raise GcsNotFoundError(f"node {node_id.hex()} is not registered")
            if self.nodes[node_id].alive:
                self._mark_dead(node_id, "unregistered")

    def check_heartbeats(self) -> list[bytes]:
        """Declare dead every alive node silent for longer than the timeout; return their ids."""
        with self._lock:
            now = self._clock()
            late = [
                nid
                for nid, node in self.nodes.items()
                if node.alive and now - self._last_seen.get(nid, now) > self._timeout_s
            ]
            for nid in late:
                self._mark_dead(nid, f"missed heartbeats for {self._timeout_s:g} s")
            return late

    def _mark_dead(self, node_id: bytes, reason: str) -> None:
        node = self.nodes[node_id]
        node.alive, node.death_reason = False, reason
        node.resources_available, node.demand = {}, []
        self._last_seen.pop(node_id, None)
        dead_actors = [
            a for a in self.actors.values() if a.node_id == node_id and a.state != ActorState.DEAD
        ]
        with self._tx() as db:
            self._save("nodes", "node_id", node_id, node)
            db.execute("DELETE FROM object_locations WHERE node_id = ?", (node_id,))
            for actor in dead_actors:
                actor.state = ActorState.DEAD
                self._save("actors", "actor_id", actor.actor_id, actor)
        for oid in [oid for oid, nodes in self._locations.items() if node_id in nodes]:
            self._locations[oid].discard(node_id)
            if not self._locations[oid]:
                del self._locations[oid]
        for actor in dead_actors:
            self._publish(CHANNEL_ACTOR, actor.actor_id, actor)
        self._publish(CHANNEL_NODE_DEAD, node_id, node)

    # ---- key-value ----------------------------------------------------------------

    def kv_put(self, namespace: str, key: bytes, value: bytes, overwrite: bool) -> bool:
        """Store ``value``; return True when the key was new (False: kept or replaced)."""
        with self._lock:
            exists = self.kv_get(namespace, key) is not None
            if not exists or overwrite:
                self._db.execute(
                    "INSERT OR REPLACE INTO kv (namespace, key, value) VALUES (?, ?, ?)",
                    (namespace, key, value),
                )
            return not exists

    def kv_get(self, namespace: str, key: bytes) -> bytes | None:
        """The value under ``key``, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM kv WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
            return None if row is None else bytes(row[0])

    def kv_del(self, namespace: str, key: bytes) -> bool:
        """Delete ``key``; return whether it existed."""
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM kv WHERE namespace = ? AND key = ?", (namespace, key)
            )
            return cur.rowcount > 0

    def kv_keys(self, namespace: str, prefix: bytes) -> list[bytes]:
        """Keys of ``namespace`` starting with ``prefix``, sorted."""
        with self._lock:
            rows = self._db.execute(
                "SELECT key FROM kv WHERE namespace = ? AND substr(key, 1, ?) = ? ORDER BY key",
                (namespace, len(prefix), prefix),
            )
            return [bytes(k) for (k,) in rows]

    # ---- actors -------------------------------------------------------------------

    def register_actor(self, actor: ActorInfo) -> None:
        """Record (or re-record) an actor and publish it on ACTOR. A re-record keeps the
        name, node, owner and payload of the earlier record where it leaves them empty.

        Raises:
            GcsInvalidRequestError: when an id is empty or too long.
            GcsAlreadyExistsError: when its name is held by another live actor
                of the same namespace.
        """
        _check_id("actor_id", actor.actor_id)
        _check_id("node_id", actor.node_id, allow_empty=True)
        with self._lock:
            old = self.actors.get(actor.actor_id)
            if old is not None:  # a re-record keeps what it does not say (name, node, ...)
                if not actor.name:
                    actor.name, actor.namespace = old.name, old.namespace
                actor.detached = actor.detached or old.detached
                actor.node_id = actor.node_id or old.node_id
                actor.owner_node_id = actor.owner_node_id or old.owner_node_id
                actor.payload = actor.payload or old.payload
            if actor.name:
                holder = self._live_named(actor.namespace, actor.name)
                if holder is not None and holder.actor_id != actor.actor_id:
                    raise GcsAlreadyExistsError(
                        f"actor name {actor.name!r} in namespace {actor.namespace!r} is taken "
                        f"by live actor {holder.actor_id.hex()}: choose another name, or kill "
                        "that actor first"
                    )
            self.actors[actor.actor_id] = actor
            self._save("actors", "actor_id", actor.actor_id, actor)
            self._publish(CHANNEL_ACTOR, actor.actor_id, actor)

    def _live_named(self, namespace: str, name: str) -> ActorInfo | None:
        for a in self.actors.values():
            if a.name == name and a.namespace == namespace and a.state != ActorState.DEAD:
                return a
        return None

    def update_actor(self, actor_id: bytes, state: ActorState, node_id: bytes) -> None:
        """Set an actor's state (and its node when ``node_id`` is not empty); publish it.

        Raises:
            GcsNotFoundError: when the actor was never registered.
        """
        with self._lock:
            actor = self.actors.get(actor_id)
            if actor is None:
                raise GcsNotFoundError(f"actor {actor_id.hex()} is not registered")
            actor.state = ActorState(state)
            if node_id:
                actor.node_id = _check_id("node_id", node_id)
            self._save("actors", "actor_id", actor_id, actor)
            self._publish(CHANNEL_ACTOR, actor_id, actor)

    def get_actor(self, actor_id: bytes, name: str, namespace: str) -> ActorInfo | None:
        """The actor with ``actor_id``, else the live actor named ``name``; None if none."""
        with self._lock:
            if actor_id:
                return self.actors.get(actor_id)
            return self._live_named(namespace, name) if name else None

    # ---- object directory -----------------------------------------------------------

    def add_object_locations(self, node_id: bytes, object_ids: list[bytes]) -> None:
        """Record that ``node_id`` holds each object.

        Raises:
            GcsNotFoundError: when the node is not registered or is dead.
        """
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or not node.alive:
                raise GcsNotFoundError(
                    f"node {node_id.hex()} is not registered as alive: register it "
                    "before reporting objects"
                )
            with self._tx() as db:  # one transaction, not one a row
                db.executemany(
                    "INSERT OR IGNORE INTO object_locations (object_id, node_id) VALUES (?, ?)",
                    [(oid, node_id) for oid in object_ids],
                )
            for oid in object_ids:
                self._locations[oid].add(node_id)

    def remove_object_locations(self, node_id: bytes, object_ids: list[bytes]) -> None:
        """Forget that ``node_id`` holds each object (unknown pairs are ignored); an empty
        ``node_id`` forgets every node's copy (the objects were freed)."""
        with self._lock:
            with self._tx() as db:
                if node_id:
                    db.executemany(
                        "DELETE FROM object_locations WHERE object_id = ? AND node_id = ?",
                        [(oid, node_id) for oid in object_ids],
                    )
                else:
                    db.executemany(
                        "DELETE FROM object_locations WHERE object_id = ?",
                        [(oid,) for oid in object_ids],
                    )
            for oid in object_ids:
                nodes = self._locations.get(oid)
                if nodes is not None:
                    if node_id:
                        nodes.discard(node_id)
                    if not nodes or not node_id:
                        del self._locations[oid]

    def get_object_locations(self, object_ids: list[bytes]) -> dict[bytes, list[bytes]]:
        """For each object id, the ids of the nodes holding it (sorted; empty if none)."""
        with self._lock:
            return {oid: sorted(self._locations.get(oid, ())) for oid in object_ids}

    # ---- jobs ----------------------------------------------------------

    def add_job(self, job: JobInfo) -> None:
        """Record a job as running (start time: now unless given).

        Raises:
            GcsInvalidRequestError: when the job id is empty or too long.
        """
        _check_id("job_id", job.job_id)
        with self._lock:
            job.start_time_s = job.start_time_s or time.time()
            job.finished, job.end_time_s = False, 0.0
            self.jobs[job.job_id] = job
            self._save("jobs", "job_id", job.job_id, job)

    def mark_job_finished(self, job_id: bytes) -> None:
        """Record a job as finished now (again: no change).

        Raises:
            GcsNotFoundError: when the job was never added.
        """
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise GcsNotFoundError(f"job {job_id.hex()} was never added")
            if not job.finished:
                job.finished, job.end_time_s = True, time.time()
                self._save("jobs", "job_id", job_id, job)
