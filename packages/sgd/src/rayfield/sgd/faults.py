"""Telling a dead actor from failing user code, for both trainers.

``gather`` waits for one call on each of a group of actors and fails fast: a call whose
actor (or its node) died raises ``ReplicaFailure``; a call that raised in user code is
re-raised as it is, unless probing the group shows that an actor died, since a live
replica whose peer died fails inside its collective with an ordinary error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import rayfield
from rayfield import exceptions as rf_exc

__all__ = ["FAULTS", "ReplicaFailure", "first_death", "gather"]

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
