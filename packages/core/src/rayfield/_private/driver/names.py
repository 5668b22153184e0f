"""Actors in a cluster's GCS actor table, named or not; each name once per namespace.

Every actor created in a cluster is recorded by its creator (``register``, before its
creation task is submitted) and kept current by the node that hosts it: ALIVE once its
constructor ran, RESTARTING while it is created again, DEAD at its final death
(``lifecycle.py``), so the state API finds every actor without task events.

In a cluster, creating an actor with ``name=`` first registers the name in the GCS
(``RegisterActor``, which refuses a name held by a live actor), so two nodes cannot both
take it; ``get_actor(name)`` asks the GCS when the name is not in the local store, and
answers at once either way. The record's payload is the handle's data as JSON (actor id,
methods with their ``num_returns``, class name): nothing is unpickled. ``kill`` marks the
actor DEAD, which frees its name.

The cluster is the one the driver joined (``init(address=...)``) or, in a worker, its
node's (``RAYFIELD_GCS_ADDRESS``; the token in ``RAYFIELD_TOKEN``, set by the node):
``context.gcs_address()``.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from rayfield._private.common.ids import short
from rayfield._private.context import sessions_root

logger = logging.getLogger("rayfield")

__all__ = ["client", "lookup", "mark_dead", "register"]


@functools.cache
def client(address: str) -> Any:
    """A GCS client of the cluster at ``address``, one per process (TLS from
    ``RAYFIELD_TLS_*`` when set)."""
    from rayfield._private.driver.launch import find_token
    from rayfield._private.gcs.client import GcsClient

    return GcsClient(address, find_token(address, sessions_root()), retry_deadline_s=10)


def register(
    address: str,
    actor_id: bytes,
    name: str,
    namespace: str,
    detached: bool,
    methods: dict[str, int],
    class_name: str,
    max_task_retries: int = 0,
) -> None:
    """Record ``actor_id`` in the cluster's actor table (PENDING_CREATION; its node
    records it ALIVE once created), taking ``name`` when one is given.

    An unnamed actor whose record fails (the GCS does not answer) is created anyway: a
    warning is logged, and its node records it once created.

    Raises:
        ValueError: when a live actor holds the name already.
        GcsError: when a named actor cannot be recorded.
    """
    from rayfield._private.protocol.errors import GcsAlreadyExistsError
    from rayfield._private.protocol.types import ActorInfo, ActorState

    payload = json.dumps(
        {"methods": methods, "class_name": class_name, "max_task_retries": max_task_retries}
    ).encode()
    info = ActorInfo(
        actor_id=actor_id,
        name=name,
        namespace=namespace,
        detached=detached,
        state=ActorState.PENDING_CREATION,
        payload=payload,
    )
    try:
        client(address).register_actor(info)
    except GcsAlreadyExistsError as exc:
        raise ValueError(f"{exc} (or pass get_if_exists=True)") from None
    except Exception as exc:
        if name:
            raise
        logger.warning("could not record actor %s in the GCS: %s", short(actor_id), exc)


def lookup(
    address: str, name: str, namespace: str
) -> tuple[bytes, dict[str, int], str, int] | None:
    """(actor id, methods, class name, max_task_retries) of the live actor called
    ``name``, else None."""
    record = client(address).get_actor(name=name, namespace=namespace)
    if record is None or not record.payload:
        return None
    data = json.loads(record.payload)
    retries = data.get("max_task_retries", 0)
    return (
        record.actor_id,
        dict(data["methods"]),
        str(data["class_name"]),
        retries if isinstance(retries, int) else 0,
    )


def mark_dead(address: str, actor_id: bytes) -> None:
    """Record that the actor is dead (its name is free again); no-op if unregistered."""
    from rayfield._private.protocol.errors import GcsNotFoundError
    from rayfield._private.protocol.types import ActorState

    try:
        client(address).update_actor(actor_id, ActorState.DEAD)
    except GcsNotFoundError:
        pass
