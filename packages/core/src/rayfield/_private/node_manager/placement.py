"""Load-based spillback: which queued tasks move to a node with free resources.

The native scheduler queues a task whose demand fits the node's totals but not what is
free now; it runs when resources come back. That is the right choice for work that
finishes (it keeps data local), but an actor holds its resources for its lifetime, so a
second actor on a full one-CPU node would wait forever while another node sits idle.
The agent therefore asks, several times a second, for the oldest ready tasks of each
shape (``scheduler_snapshot()["ready_tasks"]``) and moves those that do not fit the
local free resources to a peer whose free resources (last heartbeat, less what was sent
to it since) fit them. Work stays local whenever it can start here.

A task no local resources can ever fit (``task_infeasible``) goes to an alive node whose
totals fit it, the one with the most of the demanded resources free first
(:func:`spill_order`); while none fits it waits in :class:`SpillTable`, and is tried
again after each heartbeat.

A plain task or actor creation submitted with a scheduling strategy (``"SPREAD"``, a node
affinity; ``common/scheduling.py``) is held by the native core until the host places it
(the ``task_placement`` event); :func:`place_strategy` decides: run it here, forward it
to a peer, or fail it.

This module is the decisions alone (pure functions and plain records, no I/O, no lock),
so it is tested without processes; ``spillback.py`` carries them out.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from rayfield._private.common.scheduling import Strategy

__all__ = [
    "NodeSlot",
    "PeerLoad",
    "Placement",
    "SpillTable",
    "fits",
    "place_strategy",
    "plan_moves",
    "spill_order",
]

EPSILON = 1e-9
SENT_MEMORY_S = 1.5  # what was sent to a peer counts against its free resources this long
REFUSED_RETRY_S = 1.0  # a task every candidate refused is tried again after this long


@dataclass
class PeerLoad:
    """What a peer can take now: its free resources as last heard, less what this node
    sent it since."""

    address: str
    available: dict[str, float] = field(default_factory=dict)


def fits(demand: Mapping[str, float], free: Mapping[str, float]) -> bool:
    """Whether every positive amount of ``demand`` is within ``free``."""
    return all(free.get(k, 0.0) + EPSILON >= v for k, v in demand.items() if v > 0)


def plan_moves(
    ready: Iterable[tuple[bytes, dict[str, float], bool]],
    local_available: dict[str, float],
    peers: list[PeerLoad],
    stay: Container[bytes] = frozenset(),
) -> list[tuple[bytes, str]]:
    """Choose ready tasks to move to peers with free resources.

    Args:
        ready: ``(task_id, demand, actor_creation)`` of tasks queued here, oldest first
            per shape (the snapshot's ``ready_tasks``).
        local_available: this node's free resources now.
        peers: alive peers and their free resources; amounts are taken from them as
            tasks are assigned (the caller's objects are updated).
        stay: tasks that must not move (they were forwarded here already: moving them
            again could bounce them between nodes).

    Returns:
        ``(task_id, address)`` pairs: actor creations first (they would hold resources
        for their lifetime), then tasks in the given order. A task that fits the local
        free resources stays (it starts here as soon as a worker is free), as does a
        task with an empty demand.
    """
    free = dict(local_available)
    candidates = sorted(ready, key=lambda t: not t[2])  # stable: creations first
    moves = []
    for task_id, demand, _creation in candidates:
        if task_id in stay or not any(v > 0 for v in demand.values()):
            continue
        if fits(demand, free):
            for k, v in demand.items():  # it takes these here
                free[k] = free.get(k, 0.0) - v
            continue
        target = next((p for p in peers if fits(demand, p.available)), None)
        if target is None:
            continue
        for k, v in demand.items():
            target.available[k] = target.available.get(k, 0.0) - v
        moves.append((task_id, target.address))
    return moves


class NodeResources(Protocol):
    """What :func:`spill_order` reads of a node (``protocol.types.NodeInfo`` has it)."""

    resources_total: dict[str, float]
    resources_available: dict[str, float]


N = TypeVar("N", bound=NodeResources)


def spill_order(demand: Mapping[str, float], nodes: Sequence[N]) -> list[N]:
    """The nodes whose totals fit ``demand``, those with most of the demanded resources
    free first: where an infeasible task is forwarded, in order of preference."""
    fitting = [n for n in nodes if fits(demand, n.resources_total)]
    fitting.sort(key=lambda n: -sum(n.resources_available.get(k, 0.0) for k in demand))
    return fitting


class SpillTable:
    """Tasks waiting for a node to fit them, and the work sent to peers lately.

    ``infeasible`` holds the tasks no alive node fits (their demand goes into the
    heartbeat, and they are tried again after each); ``not_before`` the tasks every
    candidate refused, kept here ``REFUSED_RETRY_S``; the sent load counts what was sent
    to a peer against its free resources for ``SENT_MEMORY_S`` (its next heartbeats do
    not show it yet).
    """

    def __init__(self) -> None:
        self.infeasible: dict[bytes, dict[str, float]] = {}  # task id -> demand
        self.not_before: dict[bytes, float] = {}  # task id -> when to try forwarding again
        self.sent: list[tuple[float, str, dict[str, float]]] = []  # (when, to, demand)

    def waiting(self, task_id: bytes, demand: Mapping[str, float]) -> None:
        """No alive node fits ``task_id`` now (or it waits out a refusal)."""
        self.infeasible[task_id] = dict(demand)

    def taken(self, task_id: bytes) -> None:
        """``task_id`` left the local queue to be forwarded (or is no longer queued)."""
        self.infeasible.pop(task_id, None)

    def retry_later(self, task_id: bytes, now: float) -> bool:
        """Whether ``task_id`` waits out a refusal still."""
        return self.not_before.get(task_id, 0.0) > now

    def refused(self, task_id: bytes, now: float) -> None:
        """Every candidate refused ``task_id``: try it again ``REFUSED_RETRY_S`` later."""
        self.not_before[task_id] = now + REFUSED_RETRY_S

    def accepted(self, task_id: bytes) -> None:
        self.not_before.pop(task_id, None)

    def keep_only(self, held: set[bytes], now: float) -> None:
        """Forget the waiting tasks not in ``held`` (the native core no longer queues
        them: cancelled, or their job ended), and refusals waited out by ``now``."""
        for task_id in [t for t in self.infeasible if t not in held]:
            del self.infeasible[task_id]
        for task_id in [t for t, when in self.not_before.items() if when <= now]:
            del self.not_before[task_id]

    def demands(self) -> list[dict[str, float]]:
        """The demand of each waiting task (the heartbeat's infeasible demand)."""
        return [dict(d) for d in self.infeasible.values()]

    def to_retry(self) -> list[tuple[bytes, dict[str, float]]]:
        return list(self.infeasible.items())

    def record_sent(self, entry: tuple[float, str, dict[str, float]]) -> None:
        self.sent.append(entry)

    def sent_refused(self, entry: tuple[float, str, dict[str, float]]) -> None:
        """The peer refused what ``entry`` sent: it does not count against it."""
        if entry in self.sent:
            self.sent.remove(entry)

    def loads(self, available: Mapping[str, Mapping[str, float]], now: float) -> list[PeerLoad]:
        """What each peer can take: ``available`` (address -> its free resources, as
        last heard) less what was sent to it within ``SENT_MEMORY_S``; those with most
        CPU free first."""
        self.sent = [e for e in self.sent if now - e[0] < SENT_MEMORY_S]
        loads = {a: PeerLoad(a, dict(free)) for a, free in available.items()}
        for _, address, demand in self.sent:
            if address in loads:
                for k, v in demand.items():
                    loads[address].available[k] = loads[address].available.get(k, 0.0) - v
        return sorted(loads.values(), key=lambda p: -p.available.get("CPU", 0.0))


@dataclass(frozen=True)
class NodeSlot:
    """A node as :func:`place_strategy` sees it: its id, resource totals and free
    resources; ``address`` is "" for this node."""

    node_id: bytes
    total: Mapping[str, float]
    available: Mapping[str, float]
    address: str = ""


@dataclass(frozen=True)
class Placement:
    """Where a task with a strategy goes: ``"here"`` (this node's queue), ``"forward"``
    (to ``node``), or ``"fail"`` (its results become errors saying ``message``)."""

    action: Literal["here", "forward", "fail"]
    node: NodeSlot | None = None
    message: str = ""


def place_strategy(
    strategy: Strategy,
    demand: Mapping[str, float],
    here: NodeSlot,
    peers: Sequence[NodeSlot],
    last_spread: bytes = b"",
) -> Placement:
    """Decide where a task with a scheduling strategy runs (Ray's semantics).

    Args:
        strategy: the decoded strategy.
        demand: the task's resources, e.g. ``{"CPU": 1.0}``.
        here: this node (its free resources now).
        peers: the other alive nodes (free resources as last heard, less what was sent
            to them lately).
        last_spread: the id of the node the previous ``SPREAD`` task went to (b"": none):
            the next one goes to the next node in id order.

    Returns:
        ``SPREAD``: the next node after ``last_spread`` (in id order, wrapping) among
        those whose totals fit ``demand`` and whose free resources fit it now, or among
        all whose totals fit when none is free; here when no node's totals fit (the
        usual infeasible handling then applies). Node affinity: the named node when it is
        alive and its totals fit; otherwise a hard one fails (naming the node and why)
        and a soft one runs here (default placement from here on).
    """
    nodes = sorted([here, *peers], key=lambda n: n.node_id)
    if strategy.kind == "SPREAD":
        feasible = [n for n in nodes if fits(demand, n.total)]
        if not feasible:
            return Placement("here")
        free = [n for n in feasible if fits(demand, n.available)] or feasible
        chosen = next((n for n in free if n.node_id > last_spread), free[0])
        return Placement("here" if chosen is here else "forward", chosen)
    target = next((n for n in nodes if n.node_id == strategy.node_id), None)
    if target is not None and fits(demand, target.total):
        return Placement("here" if target is here else "forward", target)
    if strategy.soft:
        return Placement("here")
    name = strategy.node_id.hex()
    if target is None:
        alive = ", ".join(n.node_id.hex() for n in nodes)
        why = f"node {name} is dead or unknown (alive nodes: {alive})"
    else:
        why = (
            f"node {name}'s resources {dict(target.total)} can never fit the demand {dict(demand)}"
        )
    return Placement(
        "fail",
        message=f"NodeAffinitySchedulingStrategy(soft=False) cannot be met: {why}",
    )
