"""Which placement group a task or actor goes into, and what it then demands.

``placed(options, resources)`` reads a ``PlacementGroupSchedulingStrategy``, the older
``placement_group=`` options, or (neither given) the caller's own group when the caller
runs in a group that captures child tasks, as Ray does. Work in a group demands its
bundle's renamed resources (``common.placement_groups.bundle_demand``) and carries the
group in its payload (``options["pg"]``), where ``get_current_placement_group()`` finds it.
"""

from __future__ import annotations

from typing import Any

from rayfield._private.common.placement_groups import GroupRef, bundle_demand
from rayfield._private.common.scheduling import PlacementGroupSchedulingStrategy
from rayfield._private.runtime.runtime import get_runtime

__all__ = ["current_group", "placed"]


def current_group() -> GroupRef | None:
    """The group the calling task or actor runs in (None: none, or a driver)."""
    wire = getattr(getattr(get_runtime(), "local", None), "placement_group", None)
    return GroupRef.from_wire(wire) if wire else None


def placed(
    options: dict[str, Any], resources: dict[str, float]
) -> tuple[dict[str, float], dict[str, Any] | None]:
    """The demand of work with ``options`` and its group's payload entry (None: no group).

    Raises:
        ValueError: the demand can never fit in the chosen bundle (the message names both).
    """
    strategy = options.get("scheduling_strategy")
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        ref = strategy.placement_group.ref(
            strategy.placement_group_bundle_index,
            bool(strategy.placement_group_capture_child_tasks),
        )
    elif options.get("placement_group", "default") is None:
        return resources, None
    elif options.get("placement_group", "default") != "default":
        ref = options["placement_group"].ref(
            options.get("placement_group_bundle_index", -1),
            bool(options.get("placement_group_capture_child_tasks")),
        )
    else:
        parent = current_group()
        if parent is None or not parent.capture or strategy not in (None, "DEFAULT"):
            return resources, None
        ref = GroupRef(parent.pg_id, parent.bundles, parent.strategy, -1, True)
    return bundle_demand(resources, ref), ref.to_wire()
