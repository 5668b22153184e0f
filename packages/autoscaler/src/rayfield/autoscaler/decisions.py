"""The autoscaler's decisions, as a pure object: nodes and demand in, launches and
terminations out. No process, socket or clock is touched here; the caller passes the
time.

One step (:meth:`ScalingPolicy.decide`) applies these rules, in this order:

0. workers the cluster lost (declared dead by the GCS, or silent for longer than
   ``heartbeat_timeout_s``) are terminated (``lost``); the rules below then replace
   them like any missing node (recovery);
1. workers whose launch-config hash differs from their type's are terminated (outdated);
   so are workers of a type the config no longer has;
2. workers above their type's ``max_workers``, then above the global ``max_workers``, are
   terminated (idle ones first);
3. every type is brought up to its ``min_workers``;
4. the requested resources (``request_resources``: bundles the cluster must be able to
   hold at once, whatever runs now) are bin-packed onto the *total* resources of the
   nodes there are and of those just decided, then onto new nodes as in rule 5; the
   nodes they land on are never removed as idle. Bundles no node type can hold are
   reported as infeasible;
5. the pending resource demand (one resource dict per queued task, actor or bundle) is
   bin-packed first onto the free capacity of the nodes there are (pending and new nodes
   count with their type's full resources), then onto new nodes: each new node is of the
   type that packs the remaining demand with the highest utilization (mean fraction of
   its resources used; ties go to the node that takes more of the demand), within each
   type's and the global ``max_workers``. Shapes no node type can hold are reported as
   infeasible, never launched for;
6. the reference's load rule: ``nodes_used`` (the sum over running nodes of their most
   used resource's fraction) gives a target of ``ceil(nodes_used /
   target_utilization_fraction)`` nodes, head included; workers of the first worker type
   with room are added up to it;
7. workers idle for ``idle_timeout_s`` or longer, that no demand or request was packed
   onto, are terminated (longest idle first) while their type stays at or above
   ``min_workers`` and the cluster stays at or above the load target; the head is never
   removed;
8. ``upscaling_speed`` caps, per node type, how many nodes of that type may be pending
   at once: ``max(5, int(upscaling_speed * max(1, running nodes of the type)))``;
   launches beyond it wait for a later step. Launches for ``min_workers`` and for
   requested resources are exempt (a type may always launch at least those), as in Ray.

Sources:
    Ray 0.7 autoscaler (spec 5.4): the utilization target, ``idle_timeout_minutes``, the
    head never removed, outdated ``ray-launch-config`` hashes terminated. Ray's later
    demand-based autoscaler and ``upscaling_speed``: "Autoscaling" in the Ray cluster docs
    (https://docs.ray.io/en/latest/cluster/vms/user-guides/configuring-autoscaling.html).
    The bin packing is first-fit decreasing (D. S. Johnson, "Near-optimal bin packing
    algorithms", PhD thesis, MIT, 1973) with the node type chosen by utilization.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Decision", "IdleTracker", "NodeTypeSpec", "NodeView", "ScalingPolicy"]

Resources = Mapping[str, float]

# The reference's floor on concurrent launches, whatever upscaling_speed says.
MIN_PENDING_LAUNCHES = 5
_EPS = 1e-9


@dataclass(frozen=True)
class NodeView:
    """What the policy knows about one node.

    Attributes:
        node_id: the provider's id.
        node_type: a key of the config's ``available_node_types``.
        is_head: True for the head (never terminated).
        pending: True while launched but not yet in the cluster.
        launch_hash: the node's launch-config tag.
        total: its resources (for a pending node: its type's).
        available: its resources not in use (for a pending node: all of them).
        idle_since: the time (seconds, caller's clock) since which every resource of the
            node has been free; None while it is in use.
        last_heartbeat: when the cluster last heard from the node (seconds, caller's
            clock); None for a node not in the cluster yet (pending). A pending node
            that had joined and is no longer known to the cluster gives the time it
            went missing, so that it is lost after the heartbeat timeout too.
        dead: True when the cluster declared the node dead (its GCS stopped hearing its
            heartbeats) while the provider still has it.
    """

    node_id: str
    node_type: str
    is_head: bool = False
    pending: bool = False
    launch_hash: str = ""
    total: Resources = field(default_factory=dict)
    available: Resources = field(default_factory=dict)
    idle_since: float | None = None
    last_heartbeat: float | None = None
    dead: bool = False


@dataclass(frozen=True)
class NodeTypeSpec:
    """One node type: ``resources`` per node, ``min_workers``/``max_workers`` (workers of
    this type, the head not counted) and the ``launch_hash`` its nodes must carry."""

    resources: Resources
    min_workers: int = 0
    max_workers: int = 0
    launch_hash: str = ""


@dataclass
class Decision:
    """What one step decided.

    Attributes:
        launch: node type -> how many nodes to launch now.
        terminate: (node id, reason) pairs, reason one of ``lost``, ``outdated``,
            ``unknown-type``, ``max-workers``, ``idle``.
        infeasible: demand shapes and requested bundles no node type can hold.
        waiting: launches wanted but held back by ``upscaling_speed`` (type -> count).
        unplaced: demand shapes that fit a type but not within ``max_workers``.
    """

    launch: dict[str, int] = field(default_factory=dict)
    terminate: list[tuple[str, str]] = field(default_factory=list)
    infeasible: list[dict[str, float]] = field(default_factory=list)
    waiting: dict[str, int] = field(default_factory=dict)
    unplaced: list[dict[str, float]] = field(default_factory=list)


Shape = tuple[tuple[str, float], ...]  # a resource dict as sorted items, hashable


def _how_many(shape: Shape, capacity: Resources) -> int:
    """How many of ``shape`` fit into ``capacity`` at once."""
    n = math.inf
    for k, v in shape:
        n = min(n, math.floor((capacity.get(k, 0.0) + _EPS) / v))
    return int(n) if n != math.inf else 0


def _pack(
    demand: dict[Shape, int], capacity: Resources
) -> tuple[dict[Shape, int], dict[str, float]]:
    """How many of each shape of ``demand`` (largest first, as ordered) fit into
    ``capacity`` first-fit, and what is left of it."""
    left = dict(capacity)
    taken: dict[Shape, int] = {}
    for shape, count in demand.items():
        n = min(count, _how_many(shape, left))
        if n > 0:
            taken[shape] = n
            for k, v in shape:
                left[k] = left.get(k, 0.0) - n * v
    return taken, left


def _subtract(demand: dict[Shape, int], taken: dict[Shape, int]) -> None:
    for shape, n in taken.items():
        demand[shape] -= n
        if demand[shape] <= 0:
            del demand[shape]


def _expand(demand: dict[Shape, int]) -> list[dict[str, float]]:
    return [dict(shape) for shape, n in demand.items() for _ in range(n)]


def _utilization(total: Resources, left: Resources) -> float:
    keys = [k for k, v in total.items() if v > 0]
    if not keys:
        return 0.0
    return sum((total[k] - left.get(k, 0.0)) / total[k] for k in keys) / len(keys)


class ScalingPolicy:
    """The autoscaler's rules over one cluster config (see the module docstring).

    Args:
        node_types: type name -> :class:`NodeTypeSpec`.
        head_node_type: the head's type (its ``min_workers``/``max_workers`` count
            workers of that type besides the head).
        max_workers: the most workers of all types together (head not counted).
        idle_timeout_s: seconds a worker must be idle before it is removed.
        target_utilization_fraction: in (0, 1]; the load rule aims at this usage.
        upscaling_speed: > 0; pending nodes of a type allowed as a multiple of the
            running nodes of that type (at least 5).
        heartbeat_timeout_s: > 0; a worker silent for longer is lost (default 30 s, Ray's
            autoscaler heartbeat timeout).

    Raises:
        ValueError: ``head_node_type`` is not a key of ``node_types``, or a number is
            out of its range.
    """

    def __init__(
        self,
        node_types: Mapping[str, NodeTypeSpec],
        head_node_type: str,
        max_workers: int,
        idle_timeout_s: float = 300.0,
        target_utilization_fraction: float = 0.8,
        upscaling_speed: float = 1.0,
        heartbeat_timeout_s: float = 30.0,
    ) -> None:
        if head_node_type not in node_types:
            raise ValueError(f"head_node_type {head_node_type!r} is not one of the node types")
        if not 0 < target_utilization_fraction <= 1:
            raise ValueError("target_utilization_fraction must be in (0, 1]")
        if upscaling_speed <= 0 or idle_timeout_s < 0 or max_workers < 0:
            raise ValueError("upscaling_speed must be > 0, idle_timeout_s and max_workers >= 0")
        if heartbeat_timeout_s <= 0:
            raise ValueError("heartbeat_timeout_s must be > 0")
        self.node_types = dict(node_types)
        self.head_node_type = head_node_type
        self.max_workers = max_workers
        self.idle_timeout_s = idle_timeout_s
        self.target_utilization_fraction = target_utilization_fraction
        self.upscaling_speed = upscaling_speed
        self.heartbeat_timeout_s = heartbeat_timeout_s

    def decide(
        self,
        nodes: Iterable[NodeView],
        demand: Iterable[Resources],
        now: float,
        blocked: Collection[str] = (),
        requested: Iterable[Resources] = (),
    ) -> Decision:
        """One autoscaling step.

        Args:
            nodes: every non-terminated node of the cluster, head included.
            demand: resource shapes waiting for a node (e.g. ``{"CPU": 1}`` per queued
                task; zero amounts are ignored).
            now: the current time, on the clock of ``NodeView.idle_since`` (seconds).
            blocked: node types not to launch now (e.g. backed off after failed
                launches); demand only they could hold stays in ``unplaced``.
            requested: bundles the cluster must be able to hold at once
                (``rayfield.autoscaler.sdk.request_resources``), running work or not.

        Returns:
            The :class:`Decision`; applying it and calling again with the resulting
            nodes and the same demand decides nothing new.
        """
        out = Decision()
        workers = [n for n in nodes if not n.is_head]
        heads = [n for n in nodes if n.is_head and not n.dead]  # a dead head holds nothing
        workers = self._drop_lost(workers, now, out)
        workers = self._drop_outdated(workers, out)
        workers = self._drop_over_max(workers, out)
        count = Counter(n.node_type for n in workers)
        order: list[str] = []  # launches in priority order
        exempt: Counter[str] = Counter()  # launches upscaling_speed does not hold back

        def can_add(t: str) -> bool:
            if t in blocked:
                return False
            spec = self.node_types[t]
            return count[t] < spec.max_workers and sum(count.values()) < self.max_workers

        def add(t: str) -> None:
            count[t] += 1
            order.append(t)

        for t in sorted(self.node_types):
            while count[t] < self.node_types[t].min_workers and can_add(t):
                add(t)
                exempt[t] += 1

        used_nodes: set[str] = set()
        # Requested bundles onto the total resources of every node, then new nodes.
        wanted = self._shapes(requested)
        totals = [(n.node_id, n.total) for n in heads + workers]
        totals += [("", self.node_types[t].resources) for t in order]
        self._fill(wanted, totals, used_nodes)
        out.infeasible += self._take_infeasible(wanted)
        before = len(order)
        self._new_nodes(wanted, can_add, add)
        for t in order[before:]:
            exempt[t] += 1
        out.unplaced += _expand(wanted)

        # Demand onto the free capacity of the nodes there are (pending and new ones
        # count with their full resources), then onto new nodes.
        wanted = self._shapes(demand)
        capacities: list[tuple[str, Resources]] = [
            (n.node_id, n.total if n.pending else n.available) for n in heads + workers
        ]
        capacities += [("", self.node_types[t].resources) for t in order]
        self._fill(wanted, capacities, used_nodes)
        out.infeasible += self._take_infeasible(wanted)
        self._new_nodes(wanted, can_add, add)
        out.unplaced += _expand(wanted)

        target = self._load_target(heads + workers)
        running_after = len(heads) + sum(count.values())
        for t in sorted(self.node_types):
            while running_after < target and t != self.head_node_type and can_add(t):
                add(t)
                running_after += 1

        self._drop_idle(workers, used_nodes, count, target, now, out)
        self._cap_launches(heads + workers, order, exempt, out)
        return out

    # ---- packing ----------------------------------------------------------------------

    @staticmethod
    def _shapes(raw_shapes: Iterable[Resources]) -> dict[Shape, int]:
        """Shape -> count, largest shapes first (first-fit decreasing)."""
        counts: Counter[Shape] = Counter()
        normal: dict[tuple[tuple[str, float], ...], Shape] = {}  # dict items -> shape
        for raw in raw_shapes:
            items = tuple(raw.items())
            shape = normal.get(items)
            if shape is None:
                shape = normal[items] = tuple(sorted((k, float(v)) for k, v in items if v > 0))
            if shape:
                counts[shape] += 1
        return dict(sorted(counts.items(), key=lambda kv: (-sum(v for _, v in kv[0]), kv[0])))

    @staticmethod
    def _fill(
        wanted: dict[Shape, int], capacities: list[tuple[str, Resources]], used: set[str]
    ) -> None:
        """Pack ``wanted`` onto ``capacities`` in order; the ids of the nodes that took
        some go into ``used`` (new nodes have the id "")."""
        for node_id, cap in capacities:
            if not wanted:
                return
            taken, _ = _pack(wanted, cap)
            if taken:
                used.add(node_id)
                _subtract(wanted, taken)

    def _take_infeasible(self, wanted: dict[Shape, int]) -> list[dict[str, float]]:
        """Remove from ``wanted`` the shapes no node type can hold; returns them."""
        infeasible = {
            shape: n
            for shape, n in wanted.items()
            if not any(_how_many(shape, t.resources) for t in self.node_types.values())
        }
        _subtract(wanted, infeasible)
        return _expand(infeasible)

    def _new_nodes(
        self,
        wanted: dict[Shape, int],
        can_add: Callable[[str], bool],
        add: Callable[[str], None],
    ) -> None:
        """Add new nodes for ``wanted`` (what is left of it stays there)."""
        while wanted:
            best = self._best_type(wanted, can_add)
            if best is None:
                return
            t, taken = best
            # The same packing stays the best while the demand still holds it (other
            # types can only pack less of a smaller demand): take it that many times.
            repeat = min(wanted[shape] // n for shape, n in taken.items())
            for _ in range(max(1, repeat)):  # within max_workers: can_add bounds it
                if not can_add(t):
                    break
                add(t)
                _subtract(wanted, taken)

    # ---- the rules ------------------------------------------------------------------

    def _drop_lost(self, workers: list[NodeView], now: float, out: Decision) -> list[NodeView]:
        keep = []
        for n in workers:
            silent = (
                n.last_heartbeat is not None and now - n.last_heartbeat > self.heartbeat_timeout_s
            )
            if n.dead or silent:
                out.terminate.append((n.node_id, "lost"))
            else:
                keep.append(n)
        return keep

    def _drop_outdated(self, workers: list[NodeView], out: Decision) -> list[NodeView]:
        keep = []
        for n in workers:
            spec = self.node_types.get(n.node_type)
            if spec is None:
                out.terminate.append((n.node_id, "unknown-type"))
            elif n.launch_hash != spec.launch_hash:
                out.terminate.append((n.node_id, "outdated"))
            else:
                keep.append(n)
        return keep

    def _drop_over_max(self, workers: list[NodeView], out: Decision) -> list[NodeView]:
        # Idle nodes go first (longest idle first), then pending ones, then busy ones.
        def victim_key(n: NodeView) -> tuple[int, float]:
            if n.idle_since is not None:
                return (0, n.idle_since)
            return (1 if n.pending else 2, 0.0)

        keep: list[NodeView] = []
        by_type: dict[str, list[NodeView]] = {}
        for n in workers:
            by_type.setdefault(n.node_type, []).append(n)
        for t, group in sorted(by_type.items()):
            group.sort(key=victim_key)
            extra = max(0, len(group) - self.node_types[t].max_workers)
            out.terminate += [(n.node_id, "max-workers") for n in group[:extra]]
            keep += group[extra:]
        keep.sort(key=victim_key)
        extra = max(0, len(keep) - self.max_workers)
        out.terminate += [(n.node_id, "max-workers") for n in keep[:extra]]
        return keep[extra:]

    def _best_type(
        self, demand: dict[Shape, int], can_add: Callable[[str], bool]
    ) -> tuple[str, dict[Shape, int]] | None:
        best: tuple[tuple[float, int], str, dict[Shape, int]] | None = None
        for t in sorted(self.node_types):
            if not can_add(t):
                continue
            total = self.node_types[t].resources
            taken, left = _pack(demand, total)
            if not taken:
                continue
            # Higher utilization, then more shapes taken; ties go to the first name.
            score = (round(_utilization(total, left), 9), sum(taken.values()))
            if best is None or score > best[0]:
                best = (score, t, taken)
        return None if best is None else (best[1], best[2])

    def _load_target(self, nodes: list[NodeView]) -> int:
        used = 0.0
        for n in nodes:
            if n.pending:
                continue
            fractions = [(v - n.available.get(k, 0.0)) / v for k, v in n.total.items() if v > 0]
            used += max(fractions, default=0.0)
        return math.ceil(used / self.target_utilization_fraction - _EPS)

    def _drop_idle(
        self,
        workers: list[NodeView],
        used_nodes: set[str],
        count: Counter[str],
        target: int,
        now: float,
        out: Decision,
    ) -> None:
        idle = [
            n
            for n in workers
            if not n.pending
            and n.idle_since is not None
            and now - n.idle_since >= self.idle_timeout_s
            and n.node_id not in used_nodes
        ]
        idle.sort(key=lambda n: n.idle_since or 0.0)
        size = 1 + sum(count.values())
        for n in idle:
            if count[n.node_type] <= self.node_types[n.node_type].min_workers or size <= target:
                continue
            count[n.node_type] -= 1
            size -= 1
            out.terminate.append((n.node_id, "idle"))

    def _cap_launches(
        self, nodes: list[NodeView], order: list[str], exempt: Counter[str], out: Decision
    ) -> None:
        gone = {node_id for node_id, _ in out.terminate}
        alive = [n for n in nodes if n.node_id not in gone]
        pending = Counter(n.node_type for n in alive if n.pending)
        running = Counter(n.node_type for n in alive if not n.pending)
        launch: Counter[str] = Counter()
        waiting: Counter[str] = Counter()
        for t in order:
            allowed = max(MIN_PENDING_LAUNCHES, int(self.upscaling_speed * max(1, running[t])))
            if launch[t] < max(allowed - pending[t], exempt[t]):
                launch[t] += 1
            else:
                waiting[t] += 1
        out.launch = dict(launch)
        out.waiting = dict(waiting)


class IdleTracker:
    """Since when each node has been idle (all its resources free), from observations.

    Pure: the caller passes each node's resources and the time of the observation.
    """

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def observe(self, node_id: str, total: Resources, available: Resources, now: float) -> None:
        """Record one observation of ``node_id`` at ``now`` (seconds)."""
        idle = all(available.get(k, 0.0) + _EPS >= v for k, v in total.items())
        if not idle:
            self._since.pop(node_id, None)
        else:
            self._since.setdefault(node_id, now)

    def idle_since(self, node_id: str) -> float | None:
        """When ``node_id`` became idle; None when busy or never seen."""
        return self._since.get(node_id)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop every node not in ``keep`` (terminated ones)."""
        alive = set(keep)
        self._since = {k: v for k, v in self._since.items() if k in alive}
