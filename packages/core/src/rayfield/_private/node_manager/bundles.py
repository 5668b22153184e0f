"""The bundles of placement groups a node holds, and the node totals they make.

``BundleLedger`` is pure: the node's own totals (``base``) and the bundles prepared or
committed here give the totals the native scheduler gets
(``NodeServer.set_total_resources``): a held bundle's amounts leave the plain resources,
and a committed bundle's renamed resources (``common.placement_groups``) are added, so
work in the group runs from its bundle and other work cannot take the reservation.
``apply_totals`` and ``end_group_work`` are the two node-side effects.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rayfield._private.common.placement_groups import group_of, node_totals

__all__ = ["BundleLedger", "HeldBundle", "end_group_work"]

logger = logging.getLogger("rayfield")
_EPS = 1e-9  # amounts are fixed point (1e-4) in the native scheduler


@dataclass
class HeldBundle:
    """A bundle held here: its resources, and whether it is committed (usable)."""

    resources: dict[str, float]
    committed: bool = False


class BundleLedger:
    """The bundles held on one node (``(pg_id, index) -> HeldBundle``).

    Args:
        base: the node's totals without any bundle.
    """

    def __init__(self, base: Mapping[str, float]) -> None:
        self.base = dict(base)
        self.held: dict[tuple[bytes, int], HeldBundle] = {}

    def prepare(
        self,
        pg_id: bytes,
        bundles: Mapping[int, Mapping[str, float]],
        available: Mapping[str, float],
    ) -> bool:
        """Reserve ``bundles`` when their sum fits ``available`` (the node's free plain
        resources now); False (nothing reserved) when not. Bundles held already count
        as reserved again (a repeated prepare)."""
        new = {i: b for i, b in bundles.items() if (pg_id, i) not in self.held}
        need: dict[str, float] = {}
        for b in new.values():
            for k, v in b.items():
                need[k] = need.get(k, 0.0) + v
        if any(available.get(k, 0.0) + _EPS < v for k, v in need.items()):
            return False
        for i, b in new.items():
            self.held[(pg_id, i)] = HeldBundle(dict(b))
        return True

    def commit(self, pg_id: bytes, indices: Iterable[int]) -> None:
        """Make prepared bundles usable (an unknown index is ignored)."""
        for i in indices:
            held = self.held.get((pg_id, i))
            if held is not None:
                held.committed = True

    def release(self, pg_id: bytes, indices: Iterable[int]) -> None:
        """Give bundles back (an unknown index is ignored)."""
        for i in indices:
            self.held.pop((pg_id, i), None)

    def groups(self) -> set[bytes]:
        """The groups with a bundle here."""
        return {pg for pg, _ in self.held}

    def report(self) -> list[dict[str, Any]]:
        """What is held, for the GCS: ``{"pg": hex, "index": i, "committed": bool}``."""
        return [
            {"pg": pg.hex(), "index": i, "committed": h.committed}
            for (pg, i), h in sorted(self.held.items())
        ]

    def totals(self) -> dict[str, float]:
        """The node's totals with the bundles held (``placement_groups.node_totals``)."""
        held = [(pg, i, h.resources, h.committed) for (pg, i), h in self.held.items()]
        return node_totals(self.base, held)


def end_group_work(server: Any, client: Any, pg_hexes: set[str], reason: str) -> int:
    """Cancel the tasks queued on this node (ready or infeasible) whose demand names one
    of the groups ``pg_hexes``; returns how many. ``server`` is the ``NodeServer``,
    ``client`` a ``StoreClient`` of this node (cancel goes through it)."""
    if not pg_hexes:
        return 0
    snap = server.scheduler_snapshot()
    ids = [tid for tid, demand, _ in snap["ready_tasks"] if _names(demand, pg_hexes)]
    ids += [tid for tid, demand, _ in snap["infeasible"] if _names(demand, pg_hexes)]
    for task_id in ids:
        try:
            client.cancel_task(task_id, False, False)
        except Exception as exc:  # the task may have started or finished meanwhile
            logger.debug("cancel of %s in a removed group: %s", task_id.hex(), exc)
    if ids:
        logger.info("%s: cancelled %d queued task(s)", reason, len(ids))
    return len(ids)


def _names(demand: Mapping[str, float], pg_hexes: set[str]) -> bool:
    return any(group_of(k) in pg_hexes for k in demand)
