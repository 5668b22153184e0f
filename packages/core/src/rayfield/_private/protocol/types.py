"""Typed records of the GCS tables, shared by its server, client and codec.

Field names equal the field names of the flatbuffers tables in
``packages/store/schema/gcs.fbs``: the codec maps one onto the other by name.
Resource amounts are floats (the wire carries them in units of 1/10000).
Times are Unix seconds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CHANNEL_ACTOR",
    "CHANNEL_NODE_ALIVE",
    "CHANNEL_NODE_DEAD",
    "ActorInfo",
    "ActorState",
    "GcsMessage",
    "JobInfo",
    "NodeInfo",
    "ResourceDemand",
]

CHANNEL_NODE_ALIVE = "NODE_ALIVE"
"""Published when a node registers; key: node id, value: its NodeInfo."""
CHANNEL_NODE_DEAD = "NODE_DEAD"
"""Published when a node unregisters or misses heartbeats; key: node id, value: NodeInfo."""
CHANNEL_ACTOR = "ACTOR"
"""Published on every actor registration or update; key: actor id, value: ActorInfo."""


class ActorState(enum.IntEnum):
    """Lifecycle of an actor (numbers as GcsActorState in gcs.fbs)."""

    PENDING_CREATION = 0
    ALIVE = 1
    RESTARTING = 2
    DEAD = 3


@dataclass
class ResourceDemand:
    """``count`` pending tasks needing ``shape`` each; ``infeasible`` when no node fits."""

    shape: dict[str, float]
    count: int = 1
    infeasible: bool = False


@dataclass
class NodeInfo:
    """One node as the GCS knows it."""

    node_id: bytes
    address: str = ""
    socket_path: str = ""
    session_dir: str = ""
    hostname: str = ""
    resources_total: dict[str, float] = field(default_factory=dict)
    resources_available: dict[str, float] = field(default_factory=dict)
    demand: list[ResourceDemand] = field(default_factory=list)
    alive: bool = True
    last_heartbeat_s: float = 0.0
    registered_s: float = 0.0
    death_reason: str = ""
    idle_duration_s: float = 0.0
    """Seconds the node had been idle (nothing running, queued or leased) at its last
    heartbeat; 0.0 while busy."""


@dataclass
class ActorInfo:
    """One actor; ``payload`` is opaque to the GCS (the creator's handle data)."""

    actor_id: bytes
    name: str = ""
    namespace: str = "default"
    detached: bool = False
    owner_node_id: bytes = b""
    node_id: bytes = b""
    state: ActorState = ActorState.PENDING_CREATION
    payload: bytes = b""

    def __post_init__(self) -> None:
        self.state = ActorState(self.state)


@dataclass
class JobInfo:
    """One job (driver): where it runs and whether it finished."""

    job_id: bytes
    driver_pid: int = 0
    node_id: bytes = b""
    entrypoint: str = ""
    start_time_s: float = 0.0
    end_time_s: float = 0.0
    finished: bool = False


@dataclass
class GcsMessage:
    """One pub/sub message; ``value`` is the decoded NodeInfo/ActorInfo of built-in channels."""

    channel: str
    key: bytes
    payload: bytes
    value: Any = None
