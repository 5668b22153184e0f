"""The GCS's placement groups: the table, its persistence, and the orders for the nodes.

The decisions are ``common.pg_machine``'s (pure); this module keeps them and talks JSON:

* Drivers, tasks and actors call ``PlacementGroup`` (``{"op": "create" | "remove" |
  "add_actor" | "get" | "list", ...}``, ``driver/groups.py``).
* Each node calls ``SyncBundles`` after every heartbeat (``node_manager/bundle_sync.py``)
  with its answers to the last prepares and the bundles it holds; the reply carries its
  orders (``prepare``, ``commit``, ``release``) and the groups removed lately (whose
  queued tasks it cancels). A bundle a node holds that the table does not give it (a
  removed group, a prepare given up, a GCS that restarted) is released; a commit the
  node missed is sent again.
* Nodes' deaths (from the liveness thread) are queued and acted on at the next call:
  their bundles are placed again (RESCHEDULING).
* ``GetNodes`` shows each node's totals with the bundles the table puts there (so
  spillback forwards work of a bundle to its node) and the waiting groups' bundles as
  demand (on the node of the job that made them), for ``rayfield status`` and the
  autoscaler; task demand for group resources is left out (no new node can serve it).

The table is written through to the GCS's key-value store (namespace
``placement_groups``, one JSON record a group), so a restarted GCS keeps it.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rayfield._private.common.ids import origin_of
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
from rayfield._private.common.placement_groups import (
    REMOVED,
    check_bundles,
    check_strategy,
    is_group_resource,
    node_totals,
)
from rayfield._private.protocol.errors import GcsAlreadyExistsError, GcsInvalidRequestError
from rayfield._private.protocol.types import NodeInfo, ResourceDemand

__all__ = ["KV_NAMESPACE", "GcsGroups"]

KV_NAMESPACE = "placement_groups"
REMOVED_NEWS_S = 60.0  # how long nodes hear of a removal (to cancel its queued tasks)
MAX_REMOVED = 1000  # removed groups kept in the table (the oldest are forgotten)


class GcsGroups:
    """The placement group table of the GCS.

    Args:
        kv_put: ``(namespace, key, value)`` writes a record (the tables' KV).
        kv_items: ``namespace -> [(key, value)]`` reads them back (at start).
        kv_del: ``(namespace, key)`` deletes one (a removed group forgotten).
        clock: seconds (time.time by default).
    """

    def __init__(
        self,
        kv_put: Callable[[str, bytes, bytes], object],
        kv_items: Callable[[str], list[tuple[bytes, bytes]]],
        kv_del: Callable[[str, bytes], object] = lambda ns, key: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._kv_put = kv_put
        self._kv_del = kv_del
        self._clock = clock
        self.table = GroupTable()
        self._actors: dict[bytes, list[bytes]] = {}
        self._outbox: dict[bytes, list[dict[str, Any]]] = collections.defaultdict(list)
        self._removed_at: dict[bytes, float] = {}
        self._dead: collections.deque[bytes] = collections.deque()
        self._saved: dict[bytes, str] = {}
        self._final: set[bytes] = set()  # removed groups whose record is written
        for key, value in kv_items(KV_NAMESPACE):
            self._restore(key, value)
        self._prune()

    # ---- calls -----------------------------------------------------------------------

    def call(self, req: Mapping[str, Any], nodes: Sequence[NodeInfo]) -> Any:
        """One ``PlacementGroup`` request; returns the JSON-able reply.

        Raises:
            GcsInvalidRequestError: an unknown op or malformed arguments.
            GcsAlreadyExistsError: a name that a group not removed holds.
        """
        op = req.get("op")
        try:
            with self._lock:
                self._take_deaths()
                if op == "create":
                    return self._create(req, nodes)
                if op == "remove":
                    pg_id = bytes.fromhex(req["pg_id"])
                    if pg_id not in self.table.groups:
                        return []
                    self._route(self.table.remove(pg_id))
                    self._removed_at[pg_id] = self._clock()
                    self._save()
                    return [a.hex() for a in self._actors.pop(pg_id, [])]
                if op == "add_actor":
                    self._actors.setdefault(bytes.fromhex(req["pg_id"]), []).append(
                        bytes.fromhex(req["actor_id"])
                    )
                    self._save()
                    return None
                if op == "get":
                    pg_id = bytes.fromhex(req.get("pg_id") or "")
                    name = str(req.get("name") or "")
                    group = self.table.groups.get(pg_id) if pg_id else self.table.by_name(name)
                    return group_info(group) if group is not None else None
                if op == "list":
                    return [group_info(g) for g in self.table.groups.values()]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, ValueError) and "exists already" in str(exc):
                raise GcsAlreadyExistsError(str(exc)) from None
            raise GcsInvalidRequestError(f"bad placement group request: {exc!r}") from None
        raise GcsInvalidRequestError(f"unknown placement group op {op!r}")

    def _create(self, req: Mapping[str, Any], nodes: Sequence[NodeInfo]) -> None:
        group = Group(
            bytes.fromhex(req["pg_id"]),
            str(req.get("name") or ""),
            check_strategy(req["strategy"]),
            check_bundles(req["bundles"]),
            bool(req.get("detached")),
            bytes.fromhex(req.get("job_id") or ""),
        )
        self.table.add(group)
        self._route(self.table.schedule(self._views(nodes)))
        self._save()

    def sync(
        self,
        node_id: bytes,
        answers: Sequence[Mapping[str, Any]],
        held: Sequence[Mapping[str, Any]],
        nodes: Sequence[NodeInfo],
    ) -> dict[str, Any]:
        """A node's ``SyncBundles``: its answers and holdings in, its orders out.

        Raises:
            GcsInvalidRequestError: malformed answers or holdings.
        """
        try:
            with self._lock:
                self._take_deaths()
                for a in answers:
                    pg_id, indices = bytes.fromhex(a["pg"]), [int(i) for i in a["indices"]]
                    self._route(self.table.prepared(pg_id, node_id, indices, bool(a["ok"])))
                self._reconcile(node_id, held)
                self._route(self.table.schedule(self._views(nodes)))
                self._save()
                now = self._clock()
                removed = [p.hex() for p, t in self._removed_at.items() if now - t < REMOVED_NEWS_S]
                return {"orders": self._outbox.pop(node_id, []), "removed": removed}
        except (KeyError, TypeError, ValueError) as exc:
            raise GcsInvalidRequestError(f"bad bundle sync: {exc!r}") from None

    def node_dead(self, node_id: bytes) -> None:
        """Queue a node's death (called with the tables' lock held: no lock taken here)."""
        self._dead.append(node_id)

    def job_finished(self, job_id: bytes) -> None:
        """A job ended: its groups that are not detached are removed."""
        with self._lock:
            for pg_id, group in self.table.groups.items():
                if group.job_id == job_id and not group.detached and group.state != REMOVED:
                    self._removed_at[pg_id] = self._clock()
            self._route(self.table.job_finished(job_id))
            self._save()

    def overlay(self, nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
        """The node records as ``GetNodes`` shows them (see the module docstring)."""
        with self._lock:
            self._take_deaths()
            held: dict[bytes, list[tuple[bytes, int, dict[str, float], bool]]] = {}
            for group in self.table.groups.values():
                if group.state == REMOVED:
                    continue
                for i, where in enumerate(group.nodes):
                    if where is not None:
                        held.setdefault(where, []).append((group.pg_id, i, group.bundles[i], True))
                for i, where in group.preparing.items():
                    held.setdefault(where, []).append((group.pg_id, i, group.bundles[i], False))
            demand = self._demand_by_node(nodes)
        out = []
        for node in nodes:
            mine = held.get(node.node_id)
            tasks = [d for d in node.demand if not any(map(is_group_resource, d.shape))]
            if mine or len(tasks) != len(node.demand) or node.node_id in demand:
                node = dataclasses.replace(
                    node,
                    resources_total=node_totals(node.resources_total, mine or []),
                    demand=tasks + demand.get(node.node_id, []),
                )
            out.append(node)
        return out

    # ---- helpers (lock held) -----------------------------------------------------------

    def _take_deaths(self) -> None:
        while self._dead:
            self._route(self.table.node_dead(self._dead.popleft()))

    def _views(self, nodes: Sequence[NodeInfo]) -> list[NodeView]:
        in_flight: dict[bytes, dict[str, float]] = {}
        for group in self.table.groups.values():
            for i, where in group.preparing.items():
                room = in_flight.setdefault(where, {})
                for k, v in group.bundles[i].items():
                    room[k] = room.get(k, 0.0) + v
        views = []
        for n in nodes:
            free = dict(n.resources_available)
            for k, v in in_flight.get(n.node_id, {}).items():
                free[k] = free.get(k, 0.0) - v
            views.append(NodeView(n.node_id, n.resources_total, free, n.alive))
        return views

    def _route(self, decisions: Sequence[Decision]) -> None:
        for d in decisions:
            if isinstance(d, Prepare):
                bundles = {str(i): dict(b) for i, b in d.bundles.items()}
                order: dict[str, Any] = {"op": "prepare", "pg": d.pg_id.hex(), "bundles": bundles}
            elif isinstance(d, Commit):
                order = {"op": "commit", "pg": d.pg_id.hex(), "indices": list(d.indices)}
            elif isinstance(d, Release):
                order = {"op": "release", "pg": d.pg_id.hex(), "indices": list(d.indices)}
            self._outbox[d.node_id].append(order)

    def _reconcile(self, node_id: bytes, held: Sequence[Mapping[str, Any]]) -> None:
        """Release what a node holds that the table does not give it; commit again what
        the table committed there and the node did not."""
        stray: dict[bytes, list[int]] = {}
        for h in held:
            pg_id, i = bytes.fromhex(h["pg"]), int(h["index"])
            group = self.table.groups.get(pg_id)
            ours = group is not None and group.state != REMOVED
            placed = ours and i < len(group.nodes) and group.nodes[i] == node_id  # type: ignore[union-attr]
            preparing = ours and group.preparing.get(i) == node_id  # type: ignore[union-attr]
            if placed and not h["committed"]:
                self._route([Commit(node_id, pg_id, (i,))])
            elif not placed and not preparing:
                stray.setdefault(pg_id, []).append(i)
        self._route([Release(node_id, pg, tuple(ix)) for pg, ix in stray.items()])

    def _demand_by_node(self, nodes: Sequence[NodeInfo]) -> dict[bytes, list[ResourceDemand]]:
        alive = [n.node_id for n in nodes if n.alive]
        out: dict[bytes, list[ResourceDemand]] = {}
        if not alive:
            return out
        for group in self.table.groups.values():
            wanted = GroupTable()
            wanted.groups[group.pg_id] = group
            shapes = wanted.pending_demand()
            if not shapes:
                continue
            home = next((n for n in alive if origin_of(n) == origin_of(group.job_id)), alive[0])
            out.setdefault(home, []).extend(ResourceDemand(s, 1, False) for s in shapes)
        return out

    def _prune(self) -> None:
        """Forget the oldest removed groups past :data:`MAX_REMOVED`."""
        removed = [p for p, g in self.table.groups.items() if g.state == REMOVED]
        for pg_id in removed[: max(0, len(removed) - MAX_REMOVED)]:
            del self.table.groups[pg_id]
            self._saved.pop(pg_id, None)
            self._final.discard(pg_id)
            self._removed_at.pop(pg_id, None)
            self._kv_del(KV_NAMESPACE, pg_id)

    def _save(self) -> None:
        self._prune()
        for pg_id, group in self.table.groups.items():
            if pg_id in self._final:
                continue  # removed and written: it does not change again
            record = json.dumps(
                {
                    "name": group.name,
                    "strategy": group.strategy,
                    "bundles": group.bundles,
                    "detached": group.detached,
                    "job_id": group.job_id.hex(),
                    "state": group.state,
                    "nodes": [n.hex() if n else None for n in group.nodes],
                    "actors": [a.hex() for a in self._actors.get(pg_id, [])],
                },
                sort_keys=True,
            )
            if self._saved.get(pg_id) != record:
                self._kv_put(KV_NAMESPACE, pg_id, record.encode())
                self._saved[pg_id] = record
            if group.state == REMOVED:
                self._final.add(pg_id)

    def _restore(self, key: bytes, value: bytes) -> None:
        r = json.loads(value)
        group = Group(
            key,
            r["name"],
            r["strategy"],
            r["bundles"],
            r["detached"],
            bytes.fromhex(r["job_id"]),
            r["state"],
            [bytes.fromhex(n) if n else None for n in r["nodes"]],
        )
        self.table.groups[key] = group
        self._actors[key] = [bytes.fromhex(a) for a in r["actors"]]
        self._saved[key] = value.decode()
        if group.state == REMOVED:
            self._final.add(key)
