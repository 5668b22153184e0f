"""The autoscaler loop: reads the cluster's load and demand, asks the pure
:class:`~rayfield.autoscaler.decisions.ScalingPolicy`, and applies its decision through the
node provider.

Load comes from rayfield-core's public state API (``rayfield.util.state.StateClient``:
each alive node's total and available resources, its pending work by resource shape and
how long it has been idle, as the node reported with its last heartbeat). A worker's
idle time is the node's own figure (``idle_duration_s``: no running task or actor,
nothing leased, queued or waiting; :func:`reported_idle_since`); for a row without it
(a node of an older core, or a load function that does not give it) the loop infers it
from the node's free resources across steps
(:class:`~rayfield.autoscaler.decisions.IdleTracker`). The
pending demand is read by an injected callable (``demand_fn``) from those rows; the
default, :func:`demand_from_rows`, takes the shapes (``demand``) and, for a row without
them, counts one ``{"CPU": 1}`` per queued or infeasible task
(:func:`demand_from_queued_tasks`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from rayfield.autoscaler.backoff import LaunchBackoff
from rayfield.autoscaler.config import launch_hash
from rayfield.autoscaler.decisions import (
    Decision,
    IdleTracker,
    NodeTypeSpec,
    NodeView,
    ScalingPolicy,
)
from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    KIND_WORKER,
    STATUS_UNINITIALIZED,
    STATUS_UP_TO_DATE,
    STATUS_UPDATE_FAILED,
    TAG_CLUSTER_NAME,
    TAG_LAUNCH_CONFIG,
    TAG_NODE_KIND,
    TAG_NODE_NAME,
    TAG_NODE_STATUS,
    TAG_NODE_TYPE,
    NodeProvider,
    ProviderError,
)
from rayfield.autoscaler.report import build_report
from rayfield.autoscaler.updater import needs_update

if TYPE_CHECKING:
    from rayfield.autoscaler.node_setup import NodeSetup

__all__ = [
    "Autoscaler",
    "demand_from_queued_tasks",
    "demand_from_rows",
    "node_tags",
    "policy_from_config",
    "reported_idle_since",
]

logger = logging.getLogger(__name__)

Row = dict[str, Any]
LoadFn = Callable[[], list[Row]]
DemandFn = Callable[[list[Row]], list[dict[str, float]]]
RequestsFn = Callable[[], list[dict[str, float]]]
PublishFn = Callable[[dict[str, Any]], None]


def demand_from_queued_tasks(rows: Sequence[Row]) -> list[dict[str, float]]:
    """One ``{"CPU": 1}`` per task queued or infeasible on an alive node
    (``tasks_queued`` + ``tasks_infeasible`` of ``rayfield.util.state.list_nodes`` rows):
    the fallback for a row without the shapes of its queued work (``demand``)."""
    shapes = []
    for row in rows:
        if row.get("alive"):
            n = int(row.get("tasks_queued") or 0) + int(row.get("tasks_infeasible") or 0)
            shapes += [{"CPU": 1.0} for _ in range(n)]
    return shapes


def demand_from_rows(rows: Sequence[Row]) -> list[dict[str, float]]:
    """The pending demand of alive nodes, one shape dict a waiting task: from each row's
    ``demand`` (``shape`` and ``count`` entries, as ``rayfield.util.state.resource_demand``
    gives them) when the row has it, else from its task counts
    (:func:`demand_from_queued_tasks`)."""
    shapes: list[dict[str, float]] = []
    for row in rows:
        if not row.get("alive"):
            continue
        if "demand" in row:
            for entry in row["demand"]:
                shape = {k: float(v) for k, v in entry["shape"].items()}
                shapes += [dict(shape) for _ in range(int(entry["count"]))]
        else:
            shapes += demand_from_queued_tasks([row])
    return shapes


def reported_idle_since(row: Row, now: float, wall: float) -> float | None:
    """When the node of ``row`` became idle, on the caller's clock, from what the node
    itself reported with its last heartbeat (``rayfield.util.state`` rows:
    ``idle_duration_s``, the seconds it had been idle then, 0.0 while busy;
    ``last_heartbeat_s``, Unix seconds).

    Args:
        row: a node row with ``idle_duration_s`` (and ``last_heartbeat_s``).
        now: the caller's clock (seconds) at ``wall``.
        wall: Unix seconds now.

    Returns:
        ``now - (seconds since the heartbeat) - idle_duration_s``; None when the node
        reported itself busy.
    """
    idle_s = float(row.get("idle_duration_s") or 0.0)
    if idle_s <= 0.0:
        return None
    beat = row.get("last_heartbeat_s")
    since_beat = max(0.0, wall - float(beat)) if beat is not None else 0.0
    return now - since_beat - idle_s


def policy_from_config(config: dict[str, Any], heartbeat_timeout_s: float = 30.0) -> ScalingPolicy:
    """The :class:`ScalingPolicy` of a prepared config (``config.prepare_config``)."""
    types = {
        name: NodeTypeSpec(
            resources={k: float(v) for k, v in t["resources"].items()},
            min_workers=t["min_workers"],
            max_workers=t["max_workers"],
            launch_hash=launch_hash(config, name),
        )
        for name, t in config["available_node_types"].items()
    }
    return ScalingPolicy(
        types,
        config["head_node_type"],
        config["max_workers"],
        idle_timeout_s=float(config["idle_timeout_minutes"]) * 60.0,
        target_utilization_fraction=config["target_utilization_fraction"],
        upscaling_speed=config["upscaling_speed"],
        heartbeat_timeout_s=heartbeat_timeout_s,
    )


def node_tags(
    config: dict[str, Any], node_type: str, head: bool, status: str = STATUS_UP_TO_DATE
) -> dict[str, str]:
    """The tags a new node of ``node_type`` is created with (``status``: up-to-date for
    a provider whose created nodes run; uninitialized for one that sets them up)."""
    kind = KIND_HEAD if head else KIND_WORKER
    return {
        TAG_CLUSTER_NAME: config["cluster_name"],
        TAG_NODE_KIND: kind,
        TAG_NODE_TYPE: node_type,
        TAG_NODE_NAME: f"rayfield-{config['cluster_name']}-{kind}",
        TAG_LAUNCH_CONFIG: launch_hash(config, node_type),
        TAG_NODE_STATUS: status,
    }


def node_config(config: dict[str, Any], node_type: str) -> dict[str, Any]:
    """What the provider creates a node of ``node_type`` from: its ``node_config`` with
    the type's ``resources``."""
    t = config["available_node_types"][node_type]
    return {**t["node_config"], "resources": dict(t["resources"])}


class Autoscaler:
    """One cluster's autoscaler: :meth:`update` is one step of the loop.

    Args:
        config: a prepared config.
        provider: the cluster's node provider.
        load_fn: returns ``rayfield.util.state.list_nodes``-style rows (``node_id``,
            ``alive``, ``resources_total``, ``resources_available``, ``tasks_queued``).
        demand_fn: the pending demand from those rows (default :func:`demand_from_rows`).
        clock: seconds, monotonic (default ``time.monotonic``).
        executor: runs the launches (``provider.create_node`` calls) in the background,
            so that a step does not wait for nodes to start; None runs them in the step.
            A node is listed by the provider (as pending) from the start of its launch.
        setup: for a provider whose nodes are set up over SSH (``needs_setup``): each
            step starts an update for every worker that needs one
            (:func:`~rayfield.autoscaler.updater.needs_update`: new, or its runtime
            config changed), replaces workers whose update failed (counted as a failed
            launch of their type), and stops rayfield on a node before terminating it.
        requests_fn: the bundles of the current ``request_resources`` call (default:
            none).
        publish_fn: called with the report of every step
            (:func:`~rayfield.autoscaler.report.build_report`); None: not published.
        wall_clock: Unix seconds (default ``time.time``): the clock of the rows'
            ``last_heartbeat_s``.
        heartbeat_timeout_s: a worker whose last heartbeat is older is lost, terminated
            and replaced (a worker its GCS declared dead is lost at once).
    """

    def __init__(
        self,
        config: dict[str, Any],
        provider: NodeProvider,
        load_fn: LoadFn,
        demand_fn: DemandFn | None = None,
        clock: Callable[[], float] = time.monotonic,
        executor: Executor | None = None,
        setup: NodeSetup | None = None,
        requests_fn: RequestsFn | None = None,
        publish_fn: PublishFn | None = None,
        wall_clock: Callable[[], float] = time.time,
        heartbeat_timeout_s: float = 30.0,
    ) -> None:
        self.config = config
        self.provider = provider
        self.policy = policy_from_config(config, heartbeat_timeout_s)
        self.requests_fn = requests_fn or (lambda: [])
        self.publish_fn = publish_fn
        self.wall_clock = wall_clock
        self.load_fn = load_fn
        self.demand_fn = demand_fn or demand_from_rows
        self.clock = clock
        self.idle = IdleTracker()
        self.executor = executor
        self.backoff = LaunchBackoff()
        self._backoff_lock = threading.Lock()  # launch threads record their outcome
        self.setup = setup
        self._updating: set[str] = set()  # node ids with an update in flight
        self._missing: dict[str, float] = {}  # started nodes the cluster has no row of: since
        self.last: Decision | None = None
        self._last_status = ""
        self._idle_deadlines: list[float] = []  # when idle workers reach the idle timeout

    def views(self, rows: Sequence[Row], now: float) -> list[NodeView]:
        """The policy's view of every non-terminated node, matched to the cluster's rows
        by the provider's ``cluster_node_id``: a node with no row is pending, one whose
        row is not alive is dead (the GCS stopped hearing it)."""
        by_id = {r["node_id"]: r for r in rows if "node_id" in r}
        wall = self.wall_clock()
        types = self.config["available_node_types"]
        views = []
        for node_id in self.provider.non_terminated_nodes({}):
            tags = self.provider.node_tags(node_id)
            node_type = tags.get(TAG_NODE_TYPE, "")
            resources = {
                k: float(v) for k, v in types.get(node_type, {}).get("resources", {}).items()
            }
            cluster_id = self.provider.cluster_node_id(node_id)
            row = by_id.get(cluster_id or "")
            heartbeat: float | None = None
            if row is not None and row.get("last_heartbeat_s") is not None:
                heartbeat = now - max(0.0, wall - float(row["last_heartbeat_s"]))
            elif row is not None:
                heartbeat = now
            elif cluster_id:  # it started, then the cluster lost every trace of it
                heartbeat = self._missing.setdefault(node_id, now)
            if row is not None:
                self._missing.pop(node_id, None)
            dead = row is not None and not row.get("alive")
            if row is None or dead:
                total = resources
                available = {} if dead else resources
            else:
                total = {k: float(v) for k, v in row["resources_total"].items()}
                available = {k: float(v) for k, v in row["resources_available"].items()}
                if "idle_duration_s" not in row:  # a node that does not report it
                    self.idle.observe(node_id, total, available, now)
            idle_since = None
            if row is not None and not dead:
                if "idle_duration_s" in row:
                    idle_since = reported_idle_since(row, now, wall)
                else:
                    idle_since = self.idle.idle_since(node_id)
            views.append(
                NodeView(
                    node_id=node_id,
                    node_type=node_type,
                    is_head=tags.get(TAG_NODE_KIND) == KIND_HEAD,
                    pending=row is None,
                    launch_hash=tags.get(TAG_LAUNCH_CONFIG, ""),
                    total=total,
                    available=available,
                    idle_since=idle_since,
                    last_heartbeat=heartbeat,
                    dead=dead,
                )
            )
        self.idle.forget(v.node_id for v in views)
        self._missing = {k: v for k, v in self._missing.items() if k in {x.node_id for x in views}}
        return views

    def _launch(self, node_type: str) -> None:
        status = STATUS_UNINITIALIZED if self.setup is not None else STATUS_UP_TO_DATE
        try:
            self.provider.create_node(
                node_config(self.config, node_type),
                node_tags(self.config, node_type, False, status),
                1,
            )
        except Exception as exc:
            with self._backoff_lock:
                delay = self.backoff.failed(node_type, self.clock(), str(exc))
            if not isinstance(exc, ProviderError):
                logger.exception("launching a node of type %s failed", node_type)
            logger.error(
                "launching a node of type %s failed (%s); no launch of that type for %.0f s",
                node_type,
                exc,
                delay,
            )
        else:
            with self._backoff_lock:
                self.backoff.succeeded(node_type)

    def _update_node(self, node_id: str, node_type: str) -> None:
        assert self.setup is not None
        try:
            self.setup.update(node_id)
        except Exception as exc:
            logger.error("setting up %s failed: %s", node_id, exc)
        finally:
            with self._backoff_lock:
                self._updating.discard(node_id)

    def _terminate(self, node_id: str, reason: str) -> None:
        logger.info("terminating %s (%s)", node_id, reason)
        if self.setup is not None:
            self.setup.stop(node_id)
        self.provider.terminate_node(node_id)

    def _run_setup(self, now: float) -> None:
        """Start updates of the workers that need one; replace the failed ones."""
        assert self.setup is not None
        current = self.setup.runtime_hashes[KIND_WORKER]
        for node_id in self.provider.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER}):
            tags = self.provider.node_tags(node_id)
            node_type = tags.get(TAG_NODE_TYPE, "")
            if tags.get(TAG_NODE_STATUS) == STATUS_UPDATE_FAILED:
                with self._backoff_lock:
                    self.backoff.failed(node_type, now, f"setting up {node_id} failed")
                self._terminate(node_id, "its setup failed")
                continue
            with self._backoff_lock:
                if not needs_update(tags, current, node_id in self._updating):
                    continue
                self._updating.add(node_id)
            logger.info("setting up %s (type %s)", node_id, node_type)
            if self.executor is None:
                self._update_node(node_id, node_type)
            else:
                self.executor.submit(self._update_node, node_id, node_type)

    def update(self) -> Decision:
        """One step: observe, decide, terminate, launch. Launch failures are logged and
        retried at the next step; the decision is returned (and kept in ``last``)."""
        now = self.clock()
        if self.setup is not None:
            self._run_setup(now)
        rows = self.load_fn()
        views = self.views(rows, now)
        demand = self.demand_fn(rows)
        requested = self.requests_fn()
        with self._backoff_lock:
            blocked = self.backoff.blocked(now)
            failures = self.backoff.report()
        decision = self.policy.decide(views, demand, now, blocked, requested)
        for node_id, reason in decision.terminate:
            self._terminate(node_id, reason)
        for node_type, count in sorted(decision.launch.items()):
            logger.info("launching %d node(s) of type %s", count, node_type)
            for _ in range(count):  # one call per node: each starts as soon as it can
                if self.executor is None:
                    self._launch(node_type)
                else:
                    self.executor.submit(self._launch, node_type)
        if self.publish_fn is not None:
            self.publish_fn(
                build_report(
                    self.config["cluster_name"],
                    views,
                    demand,
                    requested,
                    decision,
                    self.policy.node_types,
                    failures,
                    blocked,
                    self.wall_clock(),
                )
            )
        pending = sum(1 for v in views if v.pending)
        status = (
            f"Autoscaler: {len(views)} nodes ({pending} pending), demand {len(demand)}, "
            f"requested {len(requested)}, "
            f"launch {decision.launch}, terminate {[n for n, _ in decision.terminate]}, "
            f"waiting {decision.waiting}, infeasible {len(decision.infeasible)}, "
            f"backed off {sorted(blocked)}"
        )
        if status != self._last_status:  # one line per change, not per step
            logger.info("%s", status)
            self._last_status = status
        self.last = decision
        terminated = {n for n, _ in decision.terminate}
        self._idle_deadlines = [
            v.idle_since + self.policy.idle_timeout_s
            for v in views
            if not v.is_head and v.idle_since is not None and v.node_id not in terminated
        ]
        return decision

    def next_step_in(self, interval_s: float, min_s: float = 0.05) -> float:
        """Seconds until the next ``update`` is due: ``interval_s``, or sooner (at least
        ``min_s``) when an idle worker reaches the idle timeout before then, so that it is
        removed at its timeout rather than up to one interval later. Deadlines already
        past (workers kept for ``min_workers`` or demand) do not shorten the wait."""
        now = self.clock()
        due = [d - now for d in self._idle_deadlines if d > now]
        return max(min_s, min([interval_s, *due]))
