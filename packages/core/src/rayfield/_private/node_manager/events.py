"""Typed events of a node's native core (``NodeServer.poll_events``).

The native core reports events as tuples whose first item names the kind;
:func:`from_native` turns one into the matching dataclass below (in this one place), and
``node.py`` dispatches on the class. Ids are 20 bytes; ``client`` is a connection of the
native core (a driver, a worker, or the agent's own store client).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ActorDied",
    "ActorHandlesChanged",
    "ActorStateChanged",
    "ActorTaskElsewhere",
    "CancelElsewhere",
    "ClientDisconnected",
    "MissingDependencies",
    "NeedWorker",
    "NodeEvent",
    "ObjectMissing",
    "OwnerDied",
    "StoreFull",
    "TaskInfeasible",
    "TaskPlacement",
    "WorkerRegistered",
    "from_native",
]


@dataclass(frozen=True, slots=True)
class NeedWorker:
    """Ready work lacks a worker: ``num_waiting`` tasks of resource ``shape`` wait."""

    shape: Mapping[str, float]
    num_waiting: int


@dataclass(frozen=True, slots=True)
class WorkerRegistered:
    """The worker process ``pid`` connected as ``client``."""

    client: int
    pid: int


@dataclass(frozen=True, slots=True)
class ActorHandlesChanged:
    """This node's count of handles to ``actor_id`` went 0 -> 1 (``held``) or 1 -> 0;
    ``scoped``: the actor ends with its last handle."""

    actor_id: bytes
    held: bool
    scoped: bool


@dataclass(frozen=True, slots=True)
class ActorStateChanged:
    """An actor hosted here finished its creation (``alive``) or is being restarted."""

    actor_id: bytes
    alive: bool


@dataclass(frozen=True, slots=True)
class ActorDied:
    """An actor hosted here is dead for good (no restart left, killed, or it exited)."""

    actor_id: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class ClientDisconnected:
    """The connection ``client`` of process ``pid`` closed; ``driver``: it was a driver."""

    client: int
    pid: int
    driver: bool


@dataclass(frozen=True, slots=True)
class OwnerDied:
    """The driver ``pid`` disconnected; ``actor_ids``: the non-detached actors it created
    that were moved to other nodes."""

    client: int
    pid: int
    actor_ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class CancelElsewhere:
    """A recursive cancel reached ``task_ids``, which this node no longer holds."""

    task_ids: tuple[bytes, ...]
    force: bool


@dataclass(frozen=True, slots=True)
class ActorTaskElsewhere:
    """The call ``task_id`` was submitted here for ``actor_id``, which lives elsewhere."""

    task_id: bytes
    actor_id: bytes


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """The task ``task_id`` (an actor creation if ``actor``) has the scheduling strategy
    ``scheduling`` (wire form, ``common/scheduling.py``): the native core holds it until
    the host places it (``NodeServer.place_task``) or takes it (``take_task``)."""

    task_id: bytes
    scheduling: str
    demand: Mapping[str, float]
    actor: bool


@dataclass(frozen=True, slots=True)
class ObjectMissing:
    """The connection ``client`` waits for ``object_id``, which this node lacks."""

    object_id: bytes
    client: int


@dataclass(frozen=True, slots=True)
class MissingDependencies:
    """The task ``task_id`` waits for arguments this node lacks (they may be elsewhere)."""

    task_id: bytes
    object_ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class TaskInfeasible:
    """No resources of this node fit ``task_id``'s ``demand``; ``reason`` says why."""

    task_id: bytes
    demand: Mapping[str, float]
    reason: str


@dataclass(frozen=True, slots=True)
class StoreFull:
    """A create found the store full after spilling: bytes requested, capacity, in use."""

    requested_bytes: int
    capacity_bytes: int
    used_bytes: int


NodeEvent = (
    NeedWorker
    | WorkerRegistered
    | ActorHandlesChanged
    | ActorStateChanged
    | ActorDied
    | ClientDisconnected
    | OwnerDied
    | CancelElsewhere
    | ActorTaskElsewhere
    | TaskPlacement
    | ObjectMissing
    | MissingDependencies
    | TaskInfeasible
    | StoreFull
)


def _ids(value: Any) -> tuple[bytes, ...]:
    return tuple(value or ())


_BUILDERS: dict[str, Any] = {
    "need_worker": lambda e: NeedWorker(dict(e[1]), int(e[2])),
    "worker_registered": lambda e: WorkerRegistered(int(e[1]), int(e[2])),
    "actor_handles": lambda e: ActorHandlesChanged(e[1], bool(e[2]), bool(e[3])),
    "actor_state": lambda e: ActorStateChanged(e[1], bool(e[2])),
    "actor_died": lambda e: ActorDied(e[1], str(e[2])),
    "client_disconnected": lambda e: ClientDisconnected(int(e[1]), int(e[2]), bool(e[3])),
    "owner_died": lambda e: OwnerDied(int(e[1]), int(e[2]), _ids(e[3])),
    "cancel_elsewhere": lambda e: CancelElsewhere(_ids(e[1]), bool(e[2])),
    "actor_task_elsewhere": lambda e: ActorTaskElsewhere(e[1], e[2]),
    "task_placement": lambda e: TaskPlacement(e[1], str(e[2]), dict(e[3]), bool(e[4])),
    "object_missing": lambda e: ObjectMissing(e[1], int(e[2])),
    "missing_dependencies": lambda e: MissingDependencies(e[1], _ids(e[2])),
    "task_infeasible": lambda e: TaskInfeasible(e[1], dict(e[2]), str(e[3])),
    "store_full": lambda e: StoreFull(int(e[1]), int(e[2]), int(e[3])),
}


def from_native(event: tuple[Any, ...]) -> NodeEvent | None:
    """The typed form of one ``NodeServer.poll_events`` tuple; None for a kind the node
    manager does not act on (the native core handles those itself)."""
    build = _BUILDERS.get(event[0]) if event else None
    return None if build is None else build(event)
