"""Telling a dead actor from failing user code, and retrying after a rebuild, for both
trainers.

``gather`` waits for one call on each of a group of actors and fails fast: a call whose
actor (or its node) died raises ``ReplicaFailure``; a call that raised in user code is
re-raised as it is, unless probing the group shows that an actor died, since a live
replica whose peer died fails inside its collective with an ordinary error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import rayfield
from rayfield import exceptions as rf_exc

__all__ = ["FAULTS", "ReplicaFailure", "first_death", "gather", "retrying"]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

# Errors that mean an actor's process (or its node) is gone, not that user code failed.
FAULTS = (rf_exc.ActorDiedError, rf_exc.WorkerCrashedError, rf_exc.ObjectLostError)


class ReplicaFailure(RuntimeError):
    """An actor of the group died; the message is the error that showed it."""


def first_death(
    pending: Sequence[Any], actors: Sequence[Any], timeout_s: float
) -> BaseException | None:
    """The error of the first of ``pending`` (refs) or of a ``get_pid`` probe of
    ``actors`` that shows a dead actor, waiting at most ``timeout_s`` seconds in all;
    None when none does."""
    probes = [a.get_pid.remote() for a in actors]
    deadline = time.monotonic() + timeout_s
    for ref in [*pending, *probes]:
        try:
            rayfield.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except FAULTS as exc:
            return exc
        except Exception:
            continue
    return None


def gather(refs: Sequence[Any], actors: Sequence[Any], probe_timeout_s: float) -> list[Any]:
    """The results of ``refs`` (one call on each actor of a group), in order.

    Args:
        refs: object refs of the calls.
        actors: the group's actors (each with ``get_pid()``), probed when a call fails.
        probe_timeout_s: how long to look for a dead actor after a call failed (s).

    Raises:
        ReplicaFailure: an actor died (its process or its node).
        rayfield.exceptions.TaskError: user code failed and no actor of the group died.
    """
    results: dict[int, Any] = {}
    index = {r: i for i, r in enumerate(refs)}
    pending = list(refs)
    while pending:
        ready, pending = rayfield.wait(pending, num_returns=1)
        for ref in ready:
            try:
                results[index[ref]] = rayfield.get(ref)
            except FAULTS as exc:
                raise ReplicaFailure(str(exc)) from exc
            except rf_exc.TaskError as exc:
                died = first_death(pending, actors, probe_timeout_s)
                if died is not None:
                    raise ReplicaFailure(str(died)) from exc
                raise
    return [results[i] for i in range(len(refs))]


def retrying(what: str, call: Callable[[], _T], recover: Callable[[], None], retries: int) -> _T:
    """``call()``; when it raises ``ReplicaFailure``, ``recover()`` (replace the dead
    actors and reload the state) and call again, at most ``retries`` times. A failure
    inside ``recover`` counts as one more.

    Args:
        what: the name of the call, for the log and the error.
        call: the work, which raises ``ReplicaFailure`` when an actor died during it.
        recover: rebuilds the group of actors.
        retries: the most rebuilds, >= 0.

    Raises:
        RuntimeError: actors died more than ``retries`` times (from the last failure).
    """
    attempt = 0
    while True:
        try:
            if attempt:
                recover()
            return call()
        except ReplicaFailure as failure:
            if attempt >= retries:
                raise RuntimeError(
                    f"{what} failed after {attempt} rebuilds: {failure}"
                ) from failure
            attempt += 1
            logger.warning(
                "An actor died during %s (%s); rebuilding (retry %d of %d)",
                what,
                failure,
                attempt,
                retries,
            )
