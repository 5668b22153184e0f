"""Scheduling strategies for ``scheduling_strategy=`` (Ray's ``ray.util.scheduling_strategies``).

The option is accepted by ``@rayfield.remote(...)`` and ``.options(...)``, for tasks and
actors:

* ``"DEFAULT"`` (or None): the node the caller is on runs the work while its resources
  allow; work it cannot place moves to another node (spillback).
* ``"SPREAD"``: across the cluster's alive nodes whose resources can fit the work, round
  robin, among those with the resources free now when there are any.
* :class:`NodeAffinitySchedulingStrategy` ``(node_id, soft)``: on the node with that id
  (hard: or not at all, the work fails with ``TaskUnschedulableError`` /
  ``ActorUnschedulableError`` when the node is dead, unknown or too small; soft: else
  where the default puts it).
* :class:`PlacementGroupSchedulingStrategy` ``(placement_group, placement_group_bundle_index=-1,
  placement_group_capture_child_tasks=None)``: in a bundle of a placement group
  (``rayfield.util.placement_group``), from the bundle's reserved resources.

Example:
    from rayfield.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = rayfield.get_runtime_context().get_node_id()
    f.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
    Cls.options(scheduling_strategy="SPREAD").remote()
"""

from __future__ import annotations

from rayfield._private.common.scheduling import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
    SchedulingStrategy,
)

__all__ = [
    "NodeAffinitySchedulingStrategy",
    "PlacementGroupSchedulingStrategy",
    "SchedulingStrategy",
]
