"""The state API's sources for a driver whose ``init()`` started its own node (no GCS).

:class:`StateClient` asks a GCS (nodes, actors, jobs, task events) and each node's
service (introspection, logs). The embedded runtime has neither: this module answers the
same calls from the node object in this process and the event files of its session, so
``rayfield.util.state`` (and ``rayfield.state``, built on it) is one API in both cases.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rayfield._private import context
from rayfield._private.common import events as _events
from rayfield._private.node_manager.introspect import Introspector
from rayfield._private.protocol.types import ActorInfo, NodeInfo
from rayfield.store import StoreError

if TYPE_CHECKING:
    from rayfield._private.node_manager.node import Node

__all__ = ["EMBEDDED_ADDRESS", "EmbeddedGcs", "EmbeddedNodeStub", "Inline"]

T = TypeVar("T")

EMBEDDED_ADDRESS = "127.0.0.1"
"""The address an embedded node's records carry (its workers' task events say the same)."""


class EmbeddedGcs:
    """The GCS calls :class:`StateClient` makes, answered for one embedded node.

    The node is the cluster's only node; actors, jobs and task events come from the
    session's event files (actors are known from their creation events, as the GCS
    learns of them). There is no key-value store (``StateClient`` refuses its calls).
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        self.logs_dir = node.session_dir / "logs"
        self.started_s = time.time()

    def get_nodes(self) -> list[NodeInfo]:
        snap = self.node.server.scheduler_snapshot()
        return [
            NodeInfo(
                node_id=self.node.server.node_id,
                address=EMBEDDED_ADDRESS,
                socket_path=self.node.socket_path,
                session_dir=str(self.node.session_dir),
                hostname=socket.gethostname(),
                resources_total=dict(snap["total"]),
                resources_available=dict(snap["available"]),
                alive=True,
                last_heartbeat_s=time.time(),
                registered_s=self.started_s,
            )
        ]

    def get_actor(self, actor_id: bytes) -> None:
        return None

    def list_actors(self) -> list[ActorInfo]:
        """The named actors created so far (each from its ``actor_named`` record, as
        PENDING_CREATION: ``StateClient.actors`` takes the state from the creation
        events once the constructor has run)."""
        named = [e for e in self._events() if e.get("kind") == _events.ACTOR_NAMED]
        return [
            ActorInfo(
                actor_id=bytes.fromhex(e["actor"]),
                name=e["name"],
                namespace=e["namespace"],
                owner_node_id=self.node.server.node_id,
                node_id=self.node.server.node_id,
                payload=json.dumps({"class_name": e["class_name"]}).encode(),
            )
            for e in named
        ]

    def list_jobs(self) -> list[Any]:
        return []

    def _events(self) -> list[dict[str, Any]]:
        ctx = context.current()
        if ctx is not None and ctx.runtime.events is not None:
            ctx.runtime.events.flush()  # this driver's own events (profile spans)
        return _events.read_events(self.logs_dir)

    def get_task_events(self, limit: int = 0) -> list[bytes]:
        found = [e for e in self._events() if e.get("kind") != _events.ACTOR_NAMED]
        if limit > 0:
            found = found[-limit:]
        return [json.dumps(e).encode() for e in found]

    def close(self) -> None:
        pass


class EmbeddedNodeStub:
    """The node-service calls :class:`StateClient` makes, answered in this process."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.introspector = Introspector(node, EMBEDDED_ADDRESS)

    def introspect(
        self, objects: bool = False, max_objects: int = 0, timeout_s: float = 0.0
    ) -> dict[str, Any]:
        return self.introspector.introspect(objects, max_objects)

    def list_logs(self, timeout_s: float = 0.0) -> list[dict[str, Any]]:
        return self.introspector.list_logs()

    def read_log(
        self, name: str, offset: int = 0, max_bytes: int = 0, timeout_s: float = 0.0
    ) -> dict[str, Any]:
        return self.introspector.read_log(name, offset, max_bytes)

    def has_objects(self, ids: list[bytes], wait_ms: int = 0) -> list[bool]:
        client = context.runtime().client
        return [bool(client.contains(i)) for i in ids]

    def kill_actor(self, actor_id: bytes, no_restart: bool, timeout_s: float = 0.0) -> bool:
        try:
            context.runtime().client.kill_actor(actor_id, no_restart)
        except StoreError:  # no such actor on this node
            return False
        return True


class Inline:
    """``map`` and ``shutdown`` of an executor, run in the caller's thread (the embedded
    state client asks one node, in this process)."""

    def map(self, fn: Callable[[Any], T], items: Any) -> Any:
        return map(fn, items)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass
