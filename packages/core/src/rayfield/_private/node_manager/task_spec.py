"""Typed task specs: what a node takes from its native core, forwards and submits again.

The native core (``NodeServer.take_task``) and the forward messages (``protocol/messages.py``)
carry a task as a dict; :meth:`TaskSpec.from_native` reads one into a :class:`TaskSpec`
and :meth:`TaskSpec.to_native` writes it back, so the rest of the node manager reads
fields, not string keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TakenTask", "TaskSpec"]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task, as submitted to a node's native core.

    Attributes:
        task_id: the task's 20-byte id (starts with its job's 12-byte id).
        payload: the pickled function call (opaque to the node manager).
        resources: what the task holds while it runs, e.g. ``{"CPU": 1.0}``.
        dependencies: ids of the objects it reads (its ``ObjectRef`` arguments).
        return_ids: ids of the objects it makes; empty for an actor's restart.
        actor_id: the actor it creates or calls; None for a plain task.
        actor_creation: True for the task that creates ``actor_id``.
        max_concurrency: calls the created actor runs at once.
        caller_id: the handle that made an actor call (its calls run in order).
        sequence_no: the call's place in its caller's order.
        max_retries: runs left after a failure (-1: no limit); for an actor's creation,
            its restarts left.
        actor_handles: ids of the actors whose handles it carries (counted by the node
            that runs it).
        scheduling: its scheduling strategy, wire form (``common/scheduling.py``; "":
            none). Kept while it waits for placement; a forward does not carry it (the
            receiving node runs the task).
        runtime_env: the runtime_env it runs in, canonical JSON (``common/runtime_env.py``;
            "": the default); a forward carries it.
    """

    task_id: bytes
    payload: bytes
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    dependencies: tuple[bytes, ...] = ()
    return_ids: tuple[bytes, ...] = ()
    actor_id: bytes | None = None
    actor_creation: bool = False
    max_concurrency: int = 1
    caller_id: bytes | None = None
    sequence_no: int = 0
    max_retries: int = 0
    actor_handles: tuple[bytes, ...] = ()
    scheduling: str = ""
    runtime_env: str = ""

    @property
    def is_actor_call(self) -> bool:
        """A call of an existing actor (not its creation, not a plain task)."""
        return bool(self.actor_id) and not self.actor_creation

    @property
    def involves_actors(self) -> bool:
        """It creates or calls an actor, or carries actor handles."""
        return bool(self.actor_id) or bool(self.actor_handles)

    def replace(self, **changes: Any) -> TaskSpec:
        """A copy with ``changes`` (field name -> value)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_native(cls, d: Mapping[str, Any]) -> TaskSpec:
        """Read the dict form (``NodeServer.take_task``, ``messages.decode_forward_batch``).

        Raises:
            KeyError: ``d`` has no ``task_id`` or no ``payload``.
        """
        return cls(
            task_id=bytes(d["task_id"]),
            payload=bytes(d["payload"]),
            resources=dict(d.get("resources") or {}),
            dependencies=tuple(d.get("dependencies") or ()),
            return_ids=tuple(d.get("return_ids") or ()),
            actor_id=d.get("actor_id") or None,
            actor_creation=bool(d.get("actor_creation")),
            max_concurrency=int(d.get("max_concurrency", 1)),
            caller_id=d.get("caller_id") or None,
            sequence_no=int(d.get("sequence_no", 0)),
            max_retries=int(d.get("max_retries", 0)),
            actor_handles=tuple(d.get("actor_handles") or ()),
            scheduling=str(d.get("scheduling") or ""),
            runtime_env=str(d.get("runtime_env") or ""),
        )

    def submit_args(self, pin_returns: bool = False, resume: bool = False) -> tuple[Any, ...]:
        """``StoreClient.submit_task``'s positional arguments for this task (no pins, not
        detached): the keyword form's values without building its dict."""
        resources = self.resources if isinstance(self.resources, dict) else dict(self.resources)
        return (
            self.task_id,
            self.payload,
            resources,
            self.dependencies,
            self.actor_id,
            self.actor_creation,
            self.max_concurrency,
            self.caller_id,
            self.sequence_no,
            self.return_ids,
            self.max_retries,
            (),  # pins
            pin_returns,
            resume,
            False,  # detached
            self.actor_handles,
            self.scheduling,
            self.runtime_env,
        )

    def to_native(self) -> dict[str, Any]:
        """The dict form: the keyword arguments of ``StoreClient.submit_task`` and the
        input of ``messages.encode_forward_batch``."""
        return {
            "task_id": self.task_id,
            "payload": self.payload,
            "resources": dict(self.resources),
            "dependencies": list(self.dependencies),
            "actor_id": self.actor_id,
            "actor_creation": self.actor_creation,
            "max_concurrency": self.max_concurrency,
            "caller_id": self.caller_id,
            "sequence_no": self.sequence_no,
            "return_ids": list(self.return_ids),
            "max_retries": self.max_retries,
            "actor_handles": list(self.actor_handles),
            "scheduling": self.scheduling,
            "runtime_env": self.runtime_env,
        }


@dataclass(frozen=True, slots=True)
class TakenTask:
    """A task taken out of the native core's queue (``NodeServer.take_task``) to be sent
    to another node, with what the core handed over with it.

    Attributes:
        spec: the task.
        kept_pins: its arguments, pinned by the agent's store client until its results
            are back (or it is queued here again).
        kept_handles: actor handles the task held here, held by the agent's client until
            the receiving node counted them.
    """

    spec: TaskSpec
    kept_pins: tuple[bytes, ...] = ()
    kept_handles: tuple[bytes, ...] = ()

    @classmethod
    def from_native(cls, d: Mapping[str, Any]) -> TakenTask:
        """Read ``NodeServer.take_task``'s dict (a spec with ``kept_pins`` and
        ``kept_handles``)."""
        return cls(
            TaskSpec.from_native(d),
            tuple(d.get("kept_pins") or ()),
            tuple(d.get("kept_handles") or ()),
        )
