"""Typed events of a node's native core (``NodeServer.poll_events``).

The native core reports events as tuples whose first item names the kind;
:func:`from_native` turns one into the matching dataclass below (in this one place), and
``node.py`` dispatches on the class. Ids are 20 bytes; ``client`` is a connection of the
native core (a driver, a worker, or the agent's own store client).

The events are frozen value classes with slots: built by :func:`_event` from their field
annotations at run time, and seen by type checkers as ``@dataclass(frozen=True,
slots=True)``. They are not made with ``dataclasses``, whose generated methods cost
about 2-3 ms of ``init()`` per class (each is compiled from source by ``exec``); this
module is imported by every ``init()`` that starts a node.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Any, TypeVar, cast

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

_C = TypeVar("_C", bound=type)


_set = object.__setattr__


class _Event:
    """What every event class has: construction by position or keyword in field order,
    no assignment after it (``FrozenInstanceError``), equality and hash by class and
    field values, copies and pickles, and a ``Name(field=value, ...)`` repr, as a frozen
    dataclass has."""

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self.__match_args__
        if not kwargs and len(args) == len(fields):  # by position (from_native): fast
            for name, value in zip(fields, args, strict=True):
                _set(self, name, value)
            return
        if len(args) > len(fields):
            raise TypeError(
                f"{type(self).__name__}() takes {len(fields)} arguments, got {len(args)}"
            )
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name not in fields or name in values:
                raise TypeError(f"{type(self).__name__}() got a bad argument {name!r}")
            values[name] = value
        missing = [f for f in fields if f not in values]
        if missing:
            raise TypeError(f"{type(self).__name__}() is missing {', '.join(missing)}")
        for name in fields:
            object.__setattr__(self, name, values[name])

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Event) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((self.__class__, self._values()))

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:  # copy and pickle
        return (self.__class__, self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__match_args__)
        return f"{type(self).__name__}({inner})"


def _make_event(cls: _C) -> _C:
    """The event class with ``cls``'s name, docstring and fields (its annotations, in
    order), as slots of an :class:`_Event`."""
    annotations = inspect.get_annotations(cls)
    fields = tuple(annotations)
    namespace = {
        "__slots__": fields,
        "__match_args__": fields,
        "__doc__": cls.__doc__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__annotations__": annotations,
    }
    event: Any = type(cls.__name__, (_Event,), namespace)
    return cast(_C, event)


if TYPE_CHECKING:  # checked as frozen dataclasses (PEP 681)
    from typing_extensions import dataclass_transform

    @dataclass_transform(frozen_default=True)
    def _event(cls: _C) -> _C: ...
else:
    _event = _make_event


@_event
class NeedWorker:
    """Ready work lacks a worker: ``num_waiting`` tasks of resource ``shape`` wait, of
    ``runtime_env`` (canonical JSON; "": the default)."""

    shape: Mapping[str, float]
    num_waiting: int
    runtime_env: str


@_event
class WorkerRegistered:
    """The worker process ``pid`` connected as ``client``."""

    client: int
    pid: int


@_event
class ActorHandlesChanged:
    """This node's count of handles to ``actor_id`` went 0 -> 1 (``held``) or 1 -> 0;
    ``scoped``: the actor ends with its last handle."""

    actor_id: bytes
    held: bool
    scoped: bool


@_event
class ActorStateChanged:
    """An actor hosted here finished its creation (``alive``) or is being restarted."""

    actor_id: bytes
    alive: bool


@_event
class ActorDied:
    """An actor hosted here is dead for good (no restart left, killed, or it exited)."""

    actor_id: bytes
    reason: str


@_event
class ClientDisconnected:
    """The connection ``client`` of process ``pid`` closed; ``driver``: it was a driver."""

    client: int
    pid: int
    driver: bool


@_event
class OwnerDied:
    """The driver ``pid`` disconnected; ``actor_ids``: the non-detached actors it created
    that were moved to other nodes."""

    client: int
    pid: int
    actor_ids: tuple[bytes, ...]


@_event
class CancelElsewhere:
    """A recursive cancel reached ``task_ids``, which this node no longer holds."""

    task_ids: tuple[bytes, ...]
    force: bool


@_event
class ActorTaskElsewhere:
    """The call ``task_id`` was submitted here for ``actor_id``, which lives elsewhere."""

    task_id: bytes
    actor_id: bytes


@_event
class TaskPlacement:
    """The task ``task_id`` (an actor creation if ``actor``) has the scheduling strategy
    ``scheduling`` (wire form, ``common/scheduling.py``): the native core holds it until
    the host places it (``NodeServer.place_task``) or takes it (``take_task``)."""

    task_id: bytes
    scheduling: str
    demand: Mapping[str, float]
    actor: bool


@_event
class ObjectMissing:
    """The connection ``client`` waits for ``object_id``, which this node lacks."""

    object_id: bytes
    client: int


@_event
class MissingDependencies:
    """The task ``task_id`` waits for arguments this node lacks (they may be elsewhere)."""

    task_id: bytes
    object_ids: tuple[bytes, ...]


@_event
class TaskInfeasible:
    """No resources of this node fit ``task_id``'s ``demand``; ``reason`` says why."""

    task_id: bytes
    demand: Mapping[str, float]
    reason: str


@_event
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
    "need_worker": lambda e: NeedWorker(dict(e[1]), int(e[2]), str(e[3]) if len(e) > 3 else ""),
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
