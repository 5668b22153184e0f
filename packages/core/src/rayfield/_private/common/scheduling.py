"""Scheduling strategies: the option values users give and their encoding on the wire.

``scheduling_strategy=`` (Ray's option of the same name) takes ``"DEFAULT"`` (or None),
``"SPREAD"``, or a :class:`NodeAffinitySchedulingStrategy` (public as
``rayfield.util.scheduling_strategies.NodeAffinitySchedulingStrategy``). A task or actor
creation with a strategy other than the default carries it to its node as a short string
(``SubmitTaskRequest.scheduling``): ``"SPREAD"`` or ``"NODE:<node id hex>:<1 soft | 0
hard>"``. The node holds such a task until its host places it
(``node_manager/placement.py`` decides: here, another node, or fail).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "NodeAffinitySchedulingStrategy",
    "SchedulingStrategy",
    "Strategy",
    "check",
    "decode",
    "encode",
    "unschedulable",
]

NODE_ID_HEX = 40  # a node id is 20 bytes


def unschedulable(why: str, actor: bool) -> str:
    """The error message of a task (``actor``: an actor creation) that cannot be placed.

    The node stores it in the task's error objects: tagged ``UNSCHEDULABLE`` for a task
    (``get`` raises ``TaskUnschedulableError``), ``ACTOR_UNSCHEDULABLE`` for the actor's
    creation and calls (``ActorUnschedulableError``).
    """
    what = "actor" if actor else "task"
    return f"the {what} cannot be scheduled: {why}"


@dataclass(frozen=True)
class NodeAffinitySchedulingStrategy:
    """Run a task or actor on one node (Ray's ``NodeAffinitySchedulingStrategy``).

    ``f.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))``.

    Args:
        node_id: the node's id in hex (40 characters), as
            ``rayfield.get_runtime_context().get_node_id()`` and ``rayfield.nodes()``
            (``"NodeID"``) give it.
        soft: False (hard): the task runs on that node or not at all: when the node is
            dead, unknown, or its resources can never fit the task, ``get`` raises
            ``TaskUnschedulableError`` (an actor: ``ActorUnschedulableError``, for its
            creation and every call). True (soft): it runs there if that node is alive and
            can fit it, else wherever the default placement puts it.

    Raises:
        TypeError: ``node_id`` is not a string, or ``soft`` not a bool.
        ValueError: ``node_id`` is not 40 hex digits.
    """

    node_id: str
    soft: bool

    def __post_init__(self) -> None:
        node_id: Any = self.node_id
        if not isinstance(node_id, str):
            raise TypeError(f"node_id must be a hex string, got {type(node_id).__name__}")
        try:
            raw = bytes.fromhex(node_id)
        except ValueError:
            raw = b""
        if len(raw) * 2 != NODE_ID_HEX:
            raise ValueError(
                f"node_id must be a node's id, {NODE_ID_HEX} hex digits (see "
                f"rayfield.nodes() or get_runtime_context().get_node_id()), got {node_id!r}"
            )
        if not isinstance(self.soft, bool):
            raise TypeError(f"soft must be True or False, got {self.soft!r}")
        object.__setattr__(self, "node_id", str(node_id).lower())


NodeAffinitySchedulingStrategy.__module__ = "rayfield.util.scheduling_strategies"

SchedulingStrategy = Literal["DEFAULT", "SPREAD"] | NodeAffinitySchedulingStrategy | None
"""What ``scheduling_strategy=`` takes."""


def check(value: Any) -> SchedulingStrategy:
    """Check a ``scheduling_strategy`` option.

    Raises:
        ValueError: a string other than ``"DEFAULT"`` or ``"SPREAD"``.
        TypeError: neither a string, None, nor a ``NodeAffinitySchedulingStrategy``.
    """
    if value is None or isinstance(value, NodeAffinitySchedulingStrategy):
        return value
    if isinstance(value, str):
        if value not in ("DEFAULT", "SPREAD"):
            raise ValueError(
                f"scheduling_strategy must be 'DEFAULT', 'SPREAD' or a "
                f"NodeAffinitySchedulingStrategy, got {value!r}"
            )
        return value  # type: ignore[return-value]
    raise TypeError(
        "scheduling_strategy must be 'DEFAULT', 'SPREAD', None or a "
        f"rayfield.util.scheduling_strategies.NodeAffinitySchedulingStrategy, "
        f"got {type(value).__name__}"
    )


def encode(value: SchedulingStrategy) -> str:
    """The wire form of a checked strategy ("" for the default)."""
    if isinstance(value, NodeAffinitySchedulingStrategy):
        return f"NODE:{value.node_id}:{int(value.soft)}"
    return "SPREAD" if value == "SPREAD" else ""


@dataclass(frozen=True)
class Strategy:
    """A decoded strategy: ``kind`` "SPREAD" or "NODE" (then ``node_id``, ``soft``)."""

    kind: Literal["SPREAD", "NODE"]
    node_id: bytes = b""
    soft: bool = False


def decode(wire: str) -> Strategy:
    """Read the wire form.

    Raises:
        ValueError: not a form :func:`encode` writes.
    """
    if wire == "SPREAD":
        return Strategy("SPREAD")
    parts = wire.split(":")
    if len(parts) == 3 and parts[0] == "NODE" and parts[2] in ("0", "1"):
        try:
            node_id = bytes.fromhex(parts[1])
        except ValueError:
            node_id = b""
        if len(node_id) * 2 == NODE_ID_HEX:
            return Strategy("NODE", node_id, parts[2] == "1")
    raise ValueError(f"unknown scheduling strategy {wire!r}")
