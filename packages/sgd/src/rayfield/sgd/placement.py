"""A trainer's actors in one placement group (the ``placement_strategy`` option).

One bundle an actor (a replica, or a DistributedSGD worker), all reserved at once through
rayfield-core's :func:`rayfield.util.placement_group` before any actor starts; actor ``i``
runs in bundle ``i``. ``"SPREAD"`` puts the bundles on distinct nodes where it can (on one
node they share it), ``"STRICT_SPREAD"`` on distinct nodes or not at all, ``"PACK"`` on as
few nodes as fit, ``"STRICT_PACK"`` on one node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rayfield.util import placement_group, remove_placement_group
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

__all__ = ["STRATEGIES", "ActorGroup", "bundle_of", "check_strategy"]

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def check_strategy(value: Any) -> str | None:
    """``value`` if it is None or a strategy name.

    Raises:
        ValueError: anything else.
    """
    if value is not None and value not in STRATEGIES:
        raise ValueError(
            f"placement_strategy must be None (no placement group) or one of "
            f"{', '.join(STRATEGIES)}, got {value!r}"
        )
    return value


def bundle_of(options: Mapping[str, Any]) -> dict[str, float]:
    """The bundle that holds one actor of ``options`` (``num_cpus``, ``num_gpus``,
    ``resources``), e.g. ``{"num_cpus": 2}`` -> ``{"CPU": 2.0}``."""
    out = {
        "CPU": float(options.get("num_cpus") or 0),
        "GPU": float(options.get("num_gpus") or 0),
        **{k: float(v) for k, v in (options.get("resources") or {}).items()},
    }
    return {k: v for k, v in out.items() if v}


class ActorGroup:
    """``count`` bundles of ``options``' resources, reserved with ``strategy``.

    Args:
        strategy: one of :data:`STRATEGIES`.
        options: one actor's resource options (``num_cpus``, ``num_gpus``, ``resources``).
        count: bundles, >= 1.
        timeout_s: how long to wait for the group to be placed (seconds).

    Raises:
        ValueError: an actor that holds nothing (core cannot reserve an empty bundle).
        RuntimeError: the group was not placed within ``timeout_s`` (for example
            ``"STRICT_SPREAD"`` with more actors than nodes); it is removed then.
    """

    def __init__(
        self, strategy: str, options: Mapping[str, Any], count: int, timeout_s: float
    ) -> None:
        bundle = bundle_of(options)
        if not bundle:
            raise ValueError(
                "placement_strategy needs actors that hold resources (num_cpus, num_gpus "
                f"or custom), got {dict(options)}"
            )
        self.strategy, self.count = strategy, count
        self.group = placement_group([bundle] * count, strategy=strategy)
        if not self.group.wait(timeout_seconds=timeout_s):
            remove_placement_group(self.group)
            raise RuntimeError(
                f"the placement group of {count} bundles of {bundle} ({strategy}) was not "
                f"placed within {timeout_s:g} s: the cluster cannot hold it now. Use fewer "
                "actors, another placement_strategy (SPREAD is best effort), or add nodes."
            )

    def options(self, index: int) -> dict[str, Any]:
        """Options that put actor ``index`` in bundle ``index % count`` (shards past the
        actors' count share their bundles round robin)."""
        return {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=index % self.count
            )
        }

    def remove(self) -> None:
        """Free the bundles (ending every actor still in them); twice: nothing."""
        remove_placement_group(self.group)
