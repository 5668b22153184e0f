"""Where this process's placement group calls go: the driver's own node, or the GCS.

``backend()`` returns the node's ``LocalGroups`` for a driver of ``rayfield.init()``
without a cluster (the driver's node is the whole cluster), else, in a cluster, a
``GcsGroups`` that sends each call to the GCS's ``PlacementGroup`` method (JSON in a
``GcsBlob``; the GCS owns the table there, ``gcs/groups.py``). Both answer the same
calls: ``create``, ``remove`` (returns the ids of the actors placed in the group, which
the caller kills), ``add_actor``, ``get`` (by id or name), ``infos`` (every group).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from rayfield._private import context
from rayfield._private.common.placement_groups import REMOVED
from rayfield._private.context import Mode
from rayfield.exceptions import RayfieldError

__all__ = ["GcsGroups", "GroupBackend", "backend", "record_actor"]


class GroupBackend(Protocol):
    """The calls of ``rayfield.util.placement_group`` (see the module docstring)."""

    def create(
        self,
        pg_id: bytes,
        name: str,
        strategy: str,
        bundles: Sequence[dict[str, float]],
        detached: bool,
        job_id: bytes,
    ) -> None: ...

    def remove(self, pg_id: bytes) -> list[bytes]: ...

    def add_actor(self, pg_id: bytes, actor_id: bytes) -> None: ...

    def get(self, pg_id: bytes = b"", name: str = "") -> dict[str, Any] | None: ...

    def infos(self) -> list[dict[str, Any]]: ...


class GcsGroups:
    """The GCS's placement group table, through its ``PlacementGroup`` method.

    Args:
        client: a ``GcsClient``.
        address: the GCS's HOST:PORT (for the nodes' ``SyncBundles`` on a removal).
    """

    def __init__(self, client: Any, address: str) -> None:
        self._client = client
        self._address = address

    def _call(self, op: str, **args: Any) -> Any:
        from rayfield._private.protocol.errors import GcsAlreadyExistsError

        data = json.dumps({"op": op, **args}).encode()
        try:
            reply = self._client.call("PlacementGroup", {"data": data})
        except GcsAlreadyExistsError as exc:  # a name clash
            raise ValueError(str(exc).split(": ", 1)[-1]) from None
        return json.loads(reply["data"] or b"null")

    def create(
        self,
        pg_id: bytes,
        name: str,
        strategy: str,
        bundles: Sequence[dict[str, float]],
        detached: bool,
        job_id: bytes,
    ) -> None:
        self._call(
            "create",
            pg_id=pg_id.hex(),
            name=name,
            strategy=strategy,
            bundles=list(bundles),
            detached=detached,
            job_id=job_id.hex(),
        )

    def remove(self, pg_id: bytes) -> list[bytes]:
        """Remove the group in the GCS, then have the nodes that held its bundles sync at
        once (``StateClient.sync_bundles``): when this returns they have released the
        bundles and ended the group's queued and running tasks, so the caller's kill of
        the group's actors frees no resource that queued work of the group could take."""
        info = self._call("get", pg_id=pg_id.hex())
        actors = [bytes.fromhex(a) for a in self._call("remove", pg_id=pg_id.hex()) or []]
        held = set((info or {}).get("bundles_to_node_id", {}).values())
        if held and (info or {}).get("state") != REMOVED:
            from rayfield._private.context import sessions_root
            from rayfield._private.driver.state_client import StateClient

            with StateClient(self._address, temp_dir=sessions_root()) as state:
                state.sync_bundles(held)
        return actors

    def add_actor(self, pg_id: bytes, actor_id: bytes) -> None:
        self._call("add_actor", pg_id=pg_id.hex(), actor_id=actor_id.hex())

    def get(self, pg_id: bytes = b"", name: str = "") -> dict[str, Any] | None:
        info = self._call("get", pg_id=pg_id.hex(), name=name)
        return _int_keys(info) if info else None

    def infos(self) -> list[dict[str, Any]]:
        return [_int_keys(i) for i in self._call("list")]


def _int_keys(info: dict[str, Any]) -> dict[str, Any]:
    """JSON made the bundle indices strings: make them ints again."""
    for key in ("bundles", "bundles_to_node_id"):
        info[key] = {int(k): v for k, v in info[key].items()}
    return info


def backend() -> GroupBackend:
    """The placement group table this process uses.

    Raises:
        RayfieldError: rayfield is not initialized; ``local_mode``; a worker (or a
            connected driver) of a node without a cluster, which cannot reach the table
            its driver holds.
    """
    ctx = context.require()
    if ctx.mode == Mode.LOCAL:
        raise RayfieldError("placement groups need a node: they are not available in local_mode")
    address = context.gcs_address()
    if address is not None:
        from rayfield._private.driver import names

        return GcsGroups(names.client(address), address)
    if ctx.mode == Mode.EMBEDDED and ctx.node is not None:
        return ctx.node.placement_groups()  # type: ignore[attr-defined]
    raise RayfieldError(
        "this process cannot reach the placement group table: without a cluster, the "
        "driver that called rayfield.init() holds it. Create, remove and list groups in "
        "the driver (tasks and actors in a group can still use it), or start a cluster "
        "(rayfield start --head) and connect to it"
    )


def record_actor(pg_id: bytes, actor_id: bytes) -> None:
    """Remember that an actor was placed in a group (removing the group kills it); a
    process that cannot reach the table (a worker without a cluster) records nothing."""
    try:
        table = backend()
    except RayfieldError:
        return
    table.add_actor(pg_id, actor_id)
