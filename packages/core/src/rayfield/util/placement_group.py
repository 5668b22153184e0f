"""Placement groups (Ray 2.x's ``ray.util.placement_group``): reserve resources on the
cluster's nodes, all or none, and run tasks and actors in them.

Example:
    from rayfield.util import placement_group, remove_placement_group
    from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    rayfield.get(pg.ready())                      # reserved on two nodes
    actor = Worker.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
    ).remote()
    remove_placement_group(pg)                    # kills the actor, frees the bundles

A bundle is a resource dict (``{"CPU": 2, "GPU": 1}``). Strategies: ``PACK`` (as few nodes
as possible), ``SPREAD`` (distinct nodes where possible), ``STRICT_PACK`` (one node or not
at all), ``STRICT_SPREAD`` (one node per bundle or not at all). A group is created all or
none (two-phase: every chosen node prepares its bundles, then all commit); one that does
not fit stays ``PENDING`` (shown as demand to ``rayfield status`` and the autoscaler) until
resources free up or nodes join. Reserved resources leave ``available_resources()``; work
in a bundle takes its resources out of the bundle. When a node dies its bundles are placed
again (``RESCHEDULING``, then ``CREATED``) and the actors in them restart there (their
``max_restarts`` permitting). Removing a group kills its actors and running tasks,
cancels its queued tasks and frees the bundles. A group ends with its job unless
``lifetime="detached"``.

Where the table lives: with ``rayfield.init()`` alone, in the driver (only the driver
creates, removes and lists groups; tasks and actors run in them as usual); in a cluster,
in the GCS (any driver, task or actor may call these functions).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

from rayfield._private import context
from rayfield._private.common import placement_groups as pgs
from rayfield._private.common.placement_groups import GroupHandle
from rayfield._private.driver import groups
from rayfield._private.runtime import placement
from rayfield._private.runtime.object_ref import ObjectRef
from rayfield.runtime_context import HexID

__all__ = [
    "PlacementGroup",
    "PlacementGroupID",
    "get_current_placement_group",
    "get_placement_group",
    "placement_group",
    "placement_group_table",
    "remove_placement_group",
]

PG_ID_BYTES = 16


class PlacementGroupID(HexID):
    """A placement group's id: a hex string with ``hex()`` and ``binary()``."""


class PlacementGroup(GroupHandle):
    """A placement group: ``id``, ``bundle_specs``, ``bundle_count``, ``strategy``;
    ``ready()`` and ``wait()``. Made by :func:`placement_group`; picklable (pass it to
    tasks and actors)."""

    @property
    def id(self) -> PlacementGroupID:
        """The group's id."""
        return PlacementGroupID(self._pg_id.hex())

    def ready(self) -> ObjectRef[PlacementGroup]:
        """An ObjectRef that resolves (to this group) once the group is created: a task of
        no resources placed in the group, so ``rayfield.get(pg.ready())`` and
        ``rayfield.wait([pg.ready()])`` wait for it. A group removed before it was created
        makes ``get`` raise ``TaskCancelledError``.

        Raises:
            RayfieldError: rayfield is not initialized.
        """
        global _READY
        if _READY is None:
            from rayfield.api import remote

            _READY = remote(num_cpus=0, name="placement_group.ready")(_ready)
        return _READY.options(placement_group=self).remote(self)

    def wait(self, timeout_seconds: float | None = 30) -> bool:
        """Wait until the group is created; True if it is, False after ``timeout_seconds``
        (None: without limit) or when it was removed first.

        Raises:
            ValueError: a negative timeout.
        """
        from rayfield.api import get, wait

        if timeout_seconds is not None and timeout_seconds < 0:
            raise ValueError(f"timeout_seconds must be >= 0 or None, got {timeout_seconds!r}")
        ref = self.ready()
        done, _ = wait([ref], timeout=timeout_seconds)
        if not done:
            from rayfield.api import cancel

            cancel(ref)
            return False
        try:
            get(ref)
        except Exception:
            return False
        return True

    def __reduce__(self) -> Any:
        return (PlacementGroup, (self._pg_id, self._bundles, self._strategy))


def _ready(group: PlacementGroup) -> PlacementGroup:
    return group


_READY: Any = None  # the remote function of ready(), made on first use


def placement_group(
    bundles: Sequence[Mapping[str, float]],
    strategy: str = "PACK",
    name: str = "",
    lifetime: str | None = None,
) -> PlacementGroup:
    """Reserve ``bundles`` with ``strategy``; returns at once (the group is ``PENDING``
    until placed: ``ready()``, ``wait()``).

    Args:
        bundles: a list of resource dicts, e.g. ``[{"CPU": 1}, {"CPU": 1, "GPU": 1}]``;
            amounts as for ``num_cpus`` (fractions up to 1, whole numbers above).
        strategy: ``"PACK"`` (default), ``"SPREAD"``, ``"STRICT_PACK"`` or
            ``"STRICT_SPREAD"``.
        name: a name unique among the groups not removed ("" for none), for
            :func:`get_placement_group`.
        lifetime: None (removed when the creating job ends) or ``"detached"``.

    Raises:
        TypeError: ``bundles`` is not a list of dicts, or ``name`` not a str.
        ValueError: an empty list, an empty or zero-only bundle, a negative amount, an
            unknown strategy or lifetime, or a name that another group holds.
        RayfieldError: rayfield is not initialized, or this process cannot reach the
            group table (a worker without a cluster; see the module docstring).
    """
    clean = pgs.check_bundles(bundles)
    strategy = pgs.check_strategy(strategy)
    detached = pgs.check_lifetime(lifetime)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    table = groups.backend()
    pg_id = os.urandom(PG_ID_BYTES)
    from rayfield._private.runtime.runtime import get_runtime

    # The job: a driver's own; in a task or actor, the job of the driver it works for.
    job_id = getattr(get_runtime().local, "job_id", None) or context.require().job_id or b""
    table.create(pg_id, name, strategy, clean, detached, job_id)
    return PlacementGroup(pg_id, clean, strategy)


def remove_placement_group(placement_group: PlacementGroup) -> None:
    """Remove a group: its bundles are freed, its queued tasks cancelled (their ``get``
    raises ``TaskCancelledError``), its running tasks killed (``WorkerCrashedError``, not
    retried; as Ray) and its actors killed for good (``ActorDiedError``). Work queued in
    the group never starts in the resources its killed actors free. Removing it twice
    does nothing.

    Raises:
        TypeError: not a placement group.
        RayfieldError: rayfield is not initialized, or the table cannot be reached.
    """
    if not isinstance(placement_group, GroupHandle):
        raise TypeError(f"expected a PlacementGroup, got {type(placement_group).__name__}")
    from rayfield._private.runtime.runtime import get_runtime

    pg_id = placement_group.ref().pg_id
    actors = groups.backend().remove(pg_id)
    client = get_runtime().client
    for actor_id in actors:
        _kill(client, actor_id)
    node = context.require().node
    if node is not None and context.gcs_address() is None:
        from rayfield._private.node_manager.bundles import end_group_work

        end_group_work(node.server, client, {pg_id.hex()}, "placement group removed")  # type: ignore[attr-defined]


def _kill(client: Any, actor_id: bytes) -> None:
    from rayfield.store.errors import ObjectNotFoundError

    try:
        client.kill_actor(actor_id, True)
    except ObjectNotFoundError:
        if context.gcs_address() is None:
            return  # ended already
        from rayfield._private.driver.state_client import kill_actor_elsewhere

        kill_actor_elsewhere(actor_id, True)


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    """The group with this name (not removed).

    Raises:
        ValueError: no such group.
        RayfieldError: rayfield is not initialized, or the table cannot be reached.
    """
    info = groups.backend().get(name=placement_group_name)
    if info is None:
        raise ValueError(f"no placement group named {placement_group_name!r}")
    return _from_info(info)


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict[str, Any]:
    """The state of one group, or of all (id hex -> info).

    An info dict has ``placement_group_id``, ``name``, ``strategy``, ``state``
    (``PENDING``, ``CREATED``, ``RESCHEDULING`` or ``REMOVED``), ``bundles`` (index ->
    resources), ``bundles_to_node_id`` (index -> node id hex, for placed bundles) and
    ``is_detached``.

    Raises:
        ValueError: an unknown group.
        RayfieldError: rayfield is not initialized, or the table cannot be reached.
    """
    table = groups.backend()
    if placement_group is None:
        return {info["placement_group_id"]: info for info in table.infos()}
    info = table.get(pg_id=placement_group.ref().pg_id)
    if info is None:
        raise ValueError(f"unknown placement group {placement_group.ref().pg_id.hex()}")
    return info


def get_current_placement_group() -> PlacementGroup | None:
    """The group the calling task or actor was placed in; None in a driver or outside
    any group.

    Raises:
        RayfieldError: rayfield is not initialized.
    """
    ref = placement.current_group()
    return PlacementGroup(ref.pg_id, ref.bundles, ref.strategy) if ref else None


def _from_info(info: Mapping[str, Any]) -> PlacementGroup:
    bundles = [info["bundles"][i] for i in sorted(info["bundles"])]
    return PlacementGroup(bytes.fromhex(info["placement_group_id"]), bundles, info["strategy"])


class _CallableModule(types.ModuleType):
    """This module, callable as :func:`placement_group`: ``rayfield.util.placement_group``
    is both the module and the function (as in Ray), whichever was imported first."""

    def __call__(self, *args: Any, **kwargs: Any) -> PlacementGroup:
        return placement_group(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
