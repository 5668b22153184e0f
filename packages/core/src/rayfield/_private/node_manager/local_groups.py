"""Placement groups of a node without a cluster (``rayfield.init()``'s embedded node).

The driver's node is the whole cluster, so the group table lives here, in the driver's
process, and its decisions (``common.pg_machine``) are carried out at once on this node:
a prepare reserves bundles in the node's ``BundleLedger`` when its free resources fit
them, a commit makes them usable, a release gives them back; each batch ends with one
``NodeServer.set_total_resources``. A thread tries the waiting groups again every
0.1 s (resources freed by finished work), while some wait. In a cluster the GCS holds
the table instead (``gcs/groups.py``) and nodes apply its orders (``node_manager/agent``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from rayfield._private.common.pg_machine import (
    Commit,
    Decision,
    Group,
    GroupTable,
    NodeView,
    Prepare,
    Release,
    group_info,
)
from rayfield._private.common.placement_groups import PENDING, RESCHEDULING
from rayfield._private.node_manager.bundles import BundleLedger, set_totals

__all__ = ["LocalGroups"]

RETRY_S = 0.1


class LocalGroups:
    """The placement group table of one node, applied to that node.

    Args:
        server: the node's ``NodeServer``.
    """

    def __init__(self, server: Any) -> None:
        self._server = server
        self._lock = threading.Lock()
        self.table = GroupTable()
        self.ledger = BundleLedger(server.scheduler_snapshot()["total"])
        self._gpu_table: dict[str, list[int]] = {}
        self._actors: dict[bytes, list[bytes]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rayfield-groups")
        self._thread.start()

    # ---- the calls of rayfield.util.placement_group -----------------------------------

    def create(
        self,
        pg_id: bytes,
        name: str,
        strategy: str,
        bundles: Sequence[dict[str, float]],
        detached: bool,
        job_id: bytes,
    ) -> None:
        """Add a group and try to place it now.

        Raises:
            ValueError: a group not removed has that name.
        """
        with self._lock:
            self.table.add(Group(pg_id, name, strategy, list(bundles), detached, job_id))
            self._pass()

    def remove(self, pg_id: bytes) -> list[bytes]:
        """Remove a group (its bundles go back at once); returns the actors placed in it,
        which the caller kills. An unknown group: nothing."""
        with self._lock:
            if pg_id not in self.table.groups:
                return []
            self._apply(self.table.remove(pg_id), {"available": {}})
            return self._actors.pop(pg_id, [])

    def add_actor(self, pg_id: bytes, actor_id: bytes) -> None:
        """Remember an actor placed in a group (killed when the group is removed)."""
        with self._lock:
            self._actors.setdefault(pg_id, []).append(actor_id)

    def get(self, pg_id: bytes = b"", name: str = "") -> dict[str, Any] | None:
        """A group's info (``pg_machine.group_info``) by id or name; None: unknown."""
        with self._lock:
            group = self.table.groups.get(pg_id) if pg_id else self.table.by_name(name)
            return group_info(group) if group is not None else None

    def infos(self) -> list[dict[str, Any]]:
        """Every group's info, in creation order."""
        with self._lock:
            return [group_info(g) for g in self.table.groups.values()]

    def pending_demand(self) -> list[dict[str, float]]:
        """Bundle shapes that wait for resources."""
        with self._lock:
            return self.table.pending_demand()

    def stop(self) -> None:
        """Stop the retry thread."""
        self._stop.set()
        self._thread.join(timeout=2)

    # ---- placing ---------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(RETRY_S):
            with self._lock:
                waiting = (PENDING, RESCHEDULING)
                if any(g.state in waiting for g in self.table.groups.values()):
                    self._pass()

    def _pass(self) -> None:
        snap = self._server.scheduler_snapshot()
        here = NodeView(self._server.node_id, dict(snap["total"]), dict(snap["available"]))
        self._apply(self.table.schedule([here]), snap)

    def _apply(self, decisions: list[Decision], snap: dict[str, Any]) -> None:
        available: dict[str, float] = dict(snap["available"])
        gpu_used: list[float] = list(snap.get("gpu_used", ()))
        queue: list[Decision] = list(decisions)
        changed = False
        while queue:
            d = queue.pop(0)
            if isinstance(d, Prepare):
                ok = self.ledger.prepare(d.pg_id, d.bundles, available, gpu_used)
                for bundle in d.bundles.values() if ok else ():
                    for k, v in bundle.items():
                        available[k] = available.get(k, 0.0) - v
                changed |= ok
                queue += self.table.prepared(d.pg_id, d.node_id, list(d.bundles), ok)
            elif isinstance(d, Commit):
                self.ledger.commit(d.pg_id, d.indices)
                changed = True
            elif isinstance(d, Release):
                self.ledger.release(d.pg_id, d.indices)
                changed = True
        if changed:
            self._gpu_table = set_totals(self._server, self.ledger, self._gpu_table)
