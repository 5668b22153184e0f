"""Scheduling strategies: the option values users give and their encoding on the wire.

``scheduling_strategy=`` (Ray's option of the same name) takes ``"DEFAULT"`` (or None),
``"SPREAD"``, a :class:`NodeAffinitySchedulingStrategy` or a
:class:`PlacementGroupSchedulingStrategy` (public in ``rayfield.util.scheduling_strategies``).
Work in a placement group needs no wire form: its demand names the bundle's resources
(``placement_groups.bundle_demand``), which only the bundle's node has. A task or actor
creation with a strategy other than the default carries it to its node as a short string
(``SubmitTaskRequest.scheduling``): ``"SPREAD"`` or ``"NODE:<node id hex>:<1 soft | 0
hard>"``. The node holds such a task until its host places it
(``node_manager/placement.py`` decides: here, another node, or fail).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rayfield._private.common.placement_groups import GroupHandle

__all__ = [
    "NodeAffinitySchedulingStrategy",
    "PlacementGroupSchedulingStrategy",
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


@dataclass(frozen=True)
class PlacementGroupSchedulingStrategy:
    """Run a task or actor in a placement group's bundle (Ray's
    ``PlacementGroupSchedulingStrategy``).

    ``f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()``.
    The work's resources come out of the bundle's reservation (its demand must fit the
    bundle, else ``.remote()`` raises ValueError naming both), and it runs on the bundle's
    node once the group is created.

    Args:
        placement_group: the group (``rayfield.util.placement_group(...)``).
        placement_group_bundle_index: the bundle, 0..bundle_count-1, or -1: any bundle.
        placement_group_capture_child_tasks: tasks and actors the work submits go into
            the same group (bundle -1) unless they say otherwise; None: False.

    Raises:
        TypeError: ``placement_group`` is not a placement group, or the index not an int.
        ValueError: the index is out of range for the group.
    """

    placement_group: GroupHandle
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool | None = None

    def __post_init__(self) -> None:
        check_group_options(
            self.placement_group,
            self.placement_group_bundle_index,
            self.placement_group_capture_child_tasks,
        )


PlacementGroupSchedulingStrategy.__module__ = "rayfield.util.scheduling_strategies"


def check_group_options(group: Any, index: Any, capture: Any) -> None:
    """Check a placement group, bundle index and capture flag (strategy or options).

    Raises:
        TypeError: ``group`` is not a placement group, ``index`` not an int, ``capture``
            not a bool or None.
        ValueError: ``index`` is not -1 or 0..bundle_count-1.
    """
    if not isinstance(group, GroupHandle):
        raise TypeError(
            "placement_group must be a placement group made by "
            f"rayfield.util.placement_group(...), got {type(group).__name__}"
        )
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"placement_group_bundle_index must be an int, got {index!r}")
    if not -1 <= index < group.bundle_count:
        raise ValueError(
            f"placement_group_bundle_index {index} is out of range: the group has "
            f"{group.bundle_count} bundle(s), so use -1 (any) or 0..{group.bundle_count - 1}"
        )
    if capture is not None and not isinstance(capture, bool):
        raise TypeError(f"placement_group_capture_child_tasks must be a bool, got {capture!r}")


SchedulingStrategy = (
    Literal["DEFAULT", "SPREAD"]
    | NodeAffinitySchedulingStrategy
    | PlacementGroupSchedulingStrategy
    | None
)
"""What ``scheduling_strategy=`` takes."""


def check(value: Any) -> SchedulingStrategy:
    """Check a ``scheduling_strategy`` option.

    Raises:
        ValueError: a string other than ``"DEFAULT"`` or ``"SPREAD"``.
        TypeError: neither a string, None, nor a ``NodeAffinitySchedulingStrategy``.
    """
    if value is None or isinstance(
        value, (NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy)
    ):
        return value
    if isinstance(value, str):
        if value not in ("DEFAULT", "SPREAD"):
            raise ValueError(
                f"scheduling_strategy must be 'DEFAULT', 'SPREAD' or a "
                f"NodeAffinitySchedulingStrategy, got {value!r}"
            )
        return value  # type: ignore[return-value]
    raise TypeError(
        "scheduling_strategy must be 'DEFAULT', 'SPREAD', None, a "
        "NodeAffinitySchedulingStrategy or a PlacementGroupSchedulingStrategy "
        f"(rayfield.util.scheduling_strategies), got {type(value).__name__}"
    )


def encode(value: SchedulingStrategy) -> str:
    """The wire form of a checked strategy ("" for the default and for a placement
    group, which places work through the bundle's renamed resources instead)."""
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
