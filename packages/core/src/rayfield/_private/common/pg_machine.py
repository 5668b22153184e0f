"""The placement group table and its decisions: a pure state machine.

Inputs are method calls (a group added or removed, a node's death, a job's end, the
answers of nodes to a prepare) and a list of :class:`NodeView` (each node's totals,
available resources and liveness) given to :meth:`GroupTable.schedule`. Outputs are
decisions the host carries out: :class:`Prepare` (reserve these bundles on a node),
:class:`Commit` (make the prepared bundles usable: add their renamed resources) and
:class:`Release` (give the bundles' resources back). No sockets, threads or clocks.

Reservation is two-phase, all or nothing (as Ray's GCS placement group scheduler): a
placement is chosen for every bundle not placed yet, each chosen node is asked to
prepare its bundles; when every node said yes the group's bundles are committed and the
group is ``CREATED``; when one said no the others release what they prepared and the
group waits (``PENDING``, or ``RESCHEDULING`` after a node death) for the next pass.

Strategies (:func:`place`): ``STRICT_PACK`` all bundles on one node; ``PACK`` on one node
if one fits them all, else as few nodes as it can (best effort); ``STRICT_SPREAD`` each
bundle on a node of its own; ``SPREAD`` on distinct nodes while there are some, else
anywhere they fit. A group that fits nowhere now stays waiting; :meth:`pending_demand`
reports its bundles (``STRICT_PACK``: their sum, one shape) for an autoscaler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rayfield._private.common.placement_groups import (
    CREATED,
    PENDING,
    REMOVED,
    RESCHEDULING,
)

__all__ = [
    "Commit",
    "Decision",
    "Group",
    "GroupTable",
    "NodeView",
    "Prepare",
    "Release",
    "group_info",
    "place",
]

Resources = Mapping[str, float]
_EPS = 1e-9


@dataclass(frozen=True)
class NodeView:
    """A node as the scheduler sees it: ``total`` and ``available`` resources."""

    node_id: bytes
    total: Resources
    available: Resources
    alive: bool = True


@dataclass(frozen=True)
class Prepare:
    """Reserve ``bundles`` (index -> resources) of group ``pg_id`` on ``node_id``."""

    node_id: bytes
    pg_id: bytes
    bundles: Mapping[int, Resources]


@dataclass(frozen=True)
class Commit:
    """Make the prepared bundles ``indices`` of ``pg_id`` on ``node_id`` usable."""

    node_id: bytes
    pg_id: bytes
    indices: tuple[int, ...]


@dataclass(frozen=True)
class Release:
    """Give back the bundles ``indices`` of ``pg_id`` on ``node_id`` (prepared or
    committed); work still in them is the host's to end."""

    node_id: bytes
    pg_id: bytes
    indices: tuple[int, ...]


Decision = Prepare | Commit | Release


@dataclass
class Group:
    """One placement group's record.

    Attributes:
        pg_id, name, strategy, bundles, detached, job_id: as created.
        state: PENDING, CREATED, RESCHEDULING or REMOVED.
        nodes: the node each bundle is committed on (None: not placed).
        preparing: bundle index -> node, for the prepare in flight.
        acks: the nodes of the prepare in flight that said yes.
    """

    pg_id: bytes
    name: str
    strategy: str
    bundles: list[dict[str, float]]
    detached: bool = False
    job_id: bytes = b""
    state: str = PENDING
    nodes: list[bytes | None] = field(default_factory=list)
    preparing: dict[int, bytes] = field(default_factory=dict)
    acks: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = [None] * len(self.bundles)

    def unplaced(self) -> list[int]:
        """Indices of the bundles on no node."""
        return [i for i, n in enumerate(self.nodes) if n is None]


def _fits(demand: Resources, free: Resources) -> bool:
    return all(free.get(k, 0.0) + _EPS >= v for k, v in demand.items())


def _take(free: dict[str, float], demand: Resources) -> None:
    for k, v in demand.items():
        free[k] = free.get(k, 0.0) - v


def _sum(bundles: Iterable[Resources]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + v
    return out


def place(
    strategy: str,
    bundles: Mapping[int, Resources],
    free: Mapping[bytes, Mapping[str, float]],
    used: Sequence[bytes] = (),
) -> dict[int, bytes] | None:
    """Choose a node for each bundle, or None when the strategy cannot place them now.

    Args:
        strategy: PACK, SPREAD, STRICT_PACK or STRICT_SPREAD.
        bundles: index -> resources, the bundles to place.
        free: node id -> free resources, the alive nodes (in a stable order).
        used: nodes that hold the group's other bundles already (after a node death).
    """
    order = sorted(bundles, key=lambda i: (-sum(bundles[i].values()), i))  # largest first
    left = {n: dict(f) for n, f in free.items()}

    def roomiest(nodes: Iterable[bytes]) -> list[bytes]:
        return sorted(nodes, key=lambda n: (-left[n].get("CPU", 0.0), n))

    if strategy in ("STRICT_PACK", "PACK"):
        whole = _sum(bundles.values())
        candidates = [n for n in used if n in left] if used else list(left)
        if strategy == "STRICT_PACK" and used and not candidates:
            candidates = list(left)  # its node died: all its bundles move together
        preferred = [n for n in candidates if n in used] or candidates
        for node in roomiest(preferred) + roomiest(set(candidates) - set(preferred)):
            if _fits(whole, left[node]):
                return dict.fromkeys(bundles, node)
        if strategy == "STRICT_PACK":
            return None
    out: dict[int, bytes] = {}
    taken: dict[bytes, int] = {n: used.count(n) for n in left}
    for i in order:
        fitting = [n for n in left if _fits(bundles[i], left[n])]
        if strategy == "STRICT_SPREAD":
            fitting = [n for n in fitting if taken[n] == 0]
        if not fitting:
            return None
        if strategy == "PACK":
            node = sorted(fitting, key=lambda n: (-taken[n], -left[n].get("CPU", 0.0), n))[0]
        else:  # SPREAD and STRICT_SPREAD: the least used node first
            node = sorted(fitting, key=lambda n: (taken[n], -left[n].get("CPU", 0.0), n))[0]
        out[i] = node
        taken[node] += 1
        _take(left[node], bundles[i])
    return out


class GroupTable:
    """Every placement group and what to do next; see the module docstring.

    Raises (from its methods): ``ValueError`` for a name that a live group holds, or a
    group id that is known already; ``KeyError`` for an unknown group.
    """

    def __init__(self) -> None:
        self.groups: dict[bytes, Group] = {}  # in creation order

    # ---- inputs --------------------------------------------------------------------

    def add(self, group: Group) -> None:
        """Record a new group (PENDING); the next :meth:`schedule` tries to place it.

        Raises:
            ValueError: its id is known, or a group not removed has its name.
        """
        if group.pg_id in self.groups:
            raise ValueError(f"placement group {group.pg_id.hex()} exists already")
        if group.name and self.by_name(group.name) is not None:
            raise ValueError(
                f"a placement group named {group.name!r} exists already: pick another name "
                "or remove that group first"
            )
        self.groups[group.pg_id] = group

    def remove(self, pg_id: bytes) -> list[Decision]:
        """Remove a group: its bundles are released on every node that holds them.

        Raises:
            KeyError: an unknown group.
        """
        group = self.groups[pg_id]
        if group.state == REMOVED:
            return []
        out = self._release_all(group)
        group.state = REMOVED
        group.nodes = [None] * len(group.bundles)
        return out

    def job_finished(self, job_id: bytes) -> list[Decision]:
        """A job (driver) ended: its groups that are not detached are removed."""
        out: list[Decision] = []
        for group in list(self.groups.values()):
            if group.job_id == job_id and not group.detached and group.state != REMOVED:
                out += self.remove(group.pg_id)
        return out

    def node_dead(self, node_id: bytes) -> list[Decision]:
        """A node died: its bundles are placed again (the group is RESCHEDULING when it
        was CREATED); a prepare in flight on it fails."""
        out: list[Decision] = []
        for group in self.groups.values():
            if group.state == REMOVED:
                continue
            if node_id in group.preparing.values():
                out += self._abort(group, failed=node_id)
            lost = [i for i, n in enumerate(group.nodes) if n == node_id]
            for i in lost:
                group.nodes[i] = None
            if lost and group.state == CREATED:
                group.state = RESCHEDULING
        return out

    def prepared(
        self, pg_id: bytes, node_id: bytes, indices: Sequence[int], ok: bool
    ) -> list[Decision]:
        """A node answered a :class:`Prepare` of bundles ``indices``. All said yes: commit
        (CREATED). One said no: release what the others prepared; the group waits for the
        next pass. A yes that comes too late (the group was removed or its prepare
        aborted) is released at once."""
        group = self.groups.get(pg_id)
        mine = tuple(
            sorted(i for i, n in (group.preparing if group else {}).items() if n == node_id)
        )
        if group is None or group.state == REMOVED or mine != tuple(sorted(indices)):
            live = group is not None and group.state != REMOVED
            if live and all(i < len(group.nodes) and group.nodes[i] == node_id for i in indices):  # type: ignore[union-attr]
                return []  # an answer heard twice: the bundles are committed there
            return [Release(node_id, pg_id, tuple(sorted(indices)))] if ok else []
        if not ok:
            return self._abort(group, failed=node_id)
        group.acks.add(node_id)
        nodes = set(group.preparing.values())
        if group.acks != nodes:
            return []
        out: list[Decision] = []
        for node in sorted(nodes):
            indices = tuple(sorted(i for i, n in group.preparing.items() if n == node))
            out.append(Commit(node, pg_id, indices))
            for i in indices:
                group.nodes[i] = node
        group.preparing, group.acks = {}, set()
        group.state = CREATED
        return out

    def schedule(self, nodes: Sequence[NodeView]) -> list[Decision]:
        """Try to place every waiting group (creation order; a group that does not fit
        does not hold back later ones) on the alive ``nodes``; returns the prepares."""
        free = {n.node_id: dict(n.available) for n in nodes if n.alive}
        out: list[Decision] = []
        for group in self.groups.values():
            if group.state not in (PENDING, RESCHEDULING) or group.preparing:
                continue
            wanted = {i: group.bundles[i] for i in group.unplaced()}
            used = [n for n in group.nodes if n is not None]
            chosen = place(group.strategy, wanted, free, used)
            if chosen is None:
                continue
            group.preparing = chosen
            for node in sorted(set(chosen.values())):
                mine = {i: wanted[i] for i, n in chosen.items() if n == node}
                _take(free[node], _sum(mine.values()))
                out.append(Prepare(node, group.pg_id, mine))
        return out

    # ---- queries -------------------------------------------------------------------

    def by_name(self, name: str) -> Group | None:
        """The group with this name that is not removed, or None."""
        for group in self.groups.values():
            if group.name == name and group.state != REMOVED:
                return group
        return None

    def pending_demand(self) -> list[dict[str, float]]:
        """Resource shapes of the bundles that wait for a node (a STRICT_PACK group's as
        one summed shape): what an autoscaler would add nodes for."""
        out: list[dict[str, float]] = []
        for group in self.groups.values():
            if group.state not in (PENDING, RESCHEDULING) or group.preparing:
                continue
            wanted = [group.bundles[i] for i in group.unplaced()]
            out += [_sum(wanted)] if group.strategy == "STRICT_PACK" else [dict(b) for b in wanted]
        return out

    # ---- helpers -------------------------------------------------------------------

    def _abort(self, group: Group, failed: bytes) -> list[Decision]:
        out: list[Decision] = []
        for node in sorted(set(group.preparing.values()) - {failed}):
            indices = tuple(sorted(i for i, n in group.preparing.items() if n == node))
            out.append(Release(node, group.pg_id, indices))
        group.preparing, group.acks = {}, set()
        return out

    def _release_all(self, group: Group) -> list[Decision]:
        held: dict[bytes, list[int]] = {}
        for i, node in [*enumerate(group.nodes), *group.preparing.items()]:
            if node is not None and i not in held.get(node, []):
                held.setdefault(node, []).append(i)
        group.preparing, group.acks = {}, set()
        return [Release(n, group.pg_id, tuple(sorted(ix))) for n, ix in sorted(held.items())]


def group_info(group: Group) -> dict[str, object]:
    """A group as ``placement_group_table()`` shows it (Ray's keys): ``placement_group_id``
    (hex), ``name``, ``strategy``, ``state``, ``bundles`` (index -> resources),
    ``bundles_to_node_id`` (index -> node id hex, placed bundles only), ``is_detached``."""
    return {
        "placement_group_id": group.pg_id.hex(),
        "name": group.name,
        "strategy": group.strategy,
        "state": group.state,
        "bundles": {i: dict(b) for i, b in enumerate(group.bundles)},
        "bundles_to_node_id": {i: n.hex() for i, n in enumerate(group.nodes) if n is not None},
        "is_detached": group.detached,
    }
