"""The bundles of placement groups a node holds, and the node totals they make.

``BundleLedger`` is pure: the node's own totals (``base``) and the bundles prepared or
committed here give the totals the native scheduler gets
(``NodeServer.set_total_resources``): a held bundle's amounts leave the plain resources,
and a committed bundle's renamed resources (``common.placement_groups``) are added, so
work in the group runs from its bundle and other work cannot take the reservation. A
bundle with ``GPU`` holds devices of its own (``common.bundle_gpus``): its work sees
them in ``CUDA_VISIBLE_DEVICES`` (``gpu_table``).
``end_group_work`` ends the work of removed groups on the node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rayfield._private.common import bundle_gpus
from rayfield._private.common.placement_groups import group_of, node_totals

__all__ = ["BundleLedger", "HeldBundle", "end_group_work", "set_totals"]

logger = logging.getLogger("rayfield")
_EPS = 1e-9  # amounts are fixed point (1e-4) in the native scheduler


@dataclass
class HeldBundle:
    """A bundle held here: its resources, whether it is committed (usable), and the GPU
    devices it holds (device -> amount)."""

    resources: dict[str, float]
    committed: bool = False
    devices: dict[int, float] = field(default_factory=dict)


class BundleLedger:
    """The bundles held on one node (``(pg_id, index) -> HeldBundle``).

    Args:
        base: the node's totals without any bundle.
    """

    def __init__(self, base: Mapping[str, float]) -> None:
        self.base = dict(base)
        self.held: dict[tuple[bytes, int], HeldBundle] = {}
        self._room = bundle_gpus.capacity(self.base.get("GPU", 0.0))

    def prepare(
        self,
        pg_id: bytes,
        bundles: Mapping[int, Mapping[str, float]],
        available: Mapping[str, float],
        gpu_used: Sequence[float] = (),
    ) -> bool:
        """Reserve ``bundles`` when their sum fits ``available`` (the node's free plain
        resources now) and each bundle's ``GPU`` finds devices (``gpu_used``: what plain
        work uses of each device now, see ``bundle_gpus.place``); False (nothing
        reserved) when not. Bundles held already count as reserved again (a repeated
        prepare)."""
        new = {i: b for i, b in bundles.items() if (pg_id, i) not in self.held}
        need: dict[str, float] = {}
        for b in new.values():
            for k, v in b.items():
                need[k] = need.get(k, 0.0) + v
        if any(available.get(k, 0.0) + _EPS < v for k, v in need.items()):
            return False
        held = self._gpus_held()
        devices: dict[int, dict[int, float]] = {}
        for i, b in new.items():
            if b.get("GPU", 0.0) > 0:
                got = bundle_gpus.place(b["GPU"], held, gpu_used, self._room)
                if got is None:
                    return False
                devices[i] = got
                for d, amount in got.items():
                    held[d] += amount
        for i, b in new.items():
            self.held[(pg_id, i)] = HeldBundle(dict(b), devices=devices.get(i, {}))
        return True

    def _gpus_held(self) -> list[float]:
        held = [0.0] * len(self._room)
        for h in self.held.values():
            for d, amount in h.devices.items():
                held[d] += amount
        return held

    def gpu_table(self) -> dict[str, list[int]]:
        """The node devices behind the committed bundles' renamed GPU resources
        (``bundle_gpus.device_table``)."""
        return bundle_gpus.device_table(
            (pg, i, h.devices) for (pg, i), h in sorted(self.held.items()) if h.committed
        )

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
        out = node_totals(self.base, held)
        if "GPU" in out and any(h.devices for h in self.held.values()):
            out["GPU"] = bundle_gpus.plain_total(out["GPU"], self._gpus_held())
        return out


def set_totals(
    server: Any, ledger: BundleLedger, written: dict[str, list[int]]
) -> dict[str, list[int]]:
    """Give the node ``ledger``'s totals. The table of the bundles' GPU devices
    (``BundleLedger.gpu_table``) is written first when it differs from ``written`` (the
    last one written), so work placed in a new bundle finds its devices; returns the
    table now written. ``server`` is the ``NodeServer``."""
    table = ledger.gpu_table()
    if table != written:
        bundle_gpus.write_table(server.socket_path, table)
    server.set_total_resources(ledger.totals())
    return table


def end_group_work(server: Any, client: Any, pg_hexes: set[str], reason: str) -> int:
    """End the work of the removed groups ``pg_hexes`` on this node; returns how many
    tasks and actors it ended. ``server`` is the ``NodeServer``, ``client`` a
    ``StoreClient`` of this node.

    Call it after the groups' bundles were released here (their renamed resources left
    the node's totals), so that nothing queued in them can start meanwhile. In order:
    the queued tasks (ready or infeasible) whose demand names a group are cancelled
    (``TaskCancelledError``); the actors whose lifetime resources name one are killed
    for good (``ActorDiedError``, no restart); the workers running a plain task of one
    are killed, and those tasks fail without retry (``WorkerCrashedError``, as Ray's
    ``remove_placement_group`` fails them).
    """
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
    ended = 0
    for held in server.worker_holdings():
        if not _names(held["resources"], pg_hexes):
            continue
        try:
            if held["actor_id"] is not None:
                client.kill_actor(held["actor_id"], True)
                ended += 1
            elif server.kill_worker(
                held["pid"], "WORKER_DIED", f"{reason}: its worker was killed", False
            ):
                ended += 1
        except Exception as exc:  # the actor or worker ended meanwhile
            logger.debug("ending work of pid %s in a removed group: %s", held["pid"], exc)
    if ids or ended:
        logger.info("%s: cancelled %d queued task(s), ended %d worker(s)", reason, len(ids), ended)
    return len(ids) + ended


def _names(demand: Mapping[str, float], pg_hexes: set[str]) -> bool:
    return any(group_of(k) in pg_hexes for k in demand)
