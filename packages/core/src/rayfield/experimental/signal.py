"""Signals between tasks, actors and the driver (the reference's experimental signal API).

A task or actor method calls ``send(signal)``; anyone calls ``receive(sources, timeout)``
with the senders: an ObjectRef returned by a task (the task is the source) or an actor
handle. Each receiving process keeps its own cursor per source, so ``receive`` returns
every signal sent since this process's previous ``receive`` on that source; ``reset()``
starts over. When a task or actor method raises, an ``ErrorSignal`` is sent for it.

Signals are objects in the store under ids derived from (source, index), pinned by the
sending process.
"""

from __future__ import annotations

from typing import Any

from rayfield._private.common.ids import task_of
from rayfield._private.runtime import runtime as _rt
from rayfield._private.runtime.object_ref import ObjectRef
from rayfield._private.runtime.signals import ErrorSignal, Signal, send_from, signal_id
from rayfield.actor import ActorHandle

__all__ = ["ErrorSignal", "Signal", "receive", "reset", "send"]


_cursors: dict[bytes, int] = {}


def _current_source() -> bytes:
    local = _rt.get_runtime().local
    actor_id = getattr(local, "actor_id", None)
    task_id = getattr(local, "task_id", None)
    if actor_id:
        return bytes(actor_id)
    if task_id:
        return bytes(task_id)
    raise RuntimeError("signal.send() is for tasks and actor methods, not the driver")


def send(signal: Signal) -> None:
    """Send `signal` from the calling task or actor.

    Raises:
        TypeError: not a Signal. RuntimeError: called from the driver.
    """
    if not isinstance(signal, Signal):
        raise TypeError(f"send() takes a Signal, got {type(signal).__name__}")
    send_from(_current_source(), signal)


def _source_id(source: Any) -> bytes:
    if isinstance(source, ObjectRef):
        return task_of(source.binary())  # the task that returns it
    if isinstance(source, ActorHandle):
        return source._actor_id
    raise TypeError(
        f"a signal source is an ObjectRef or an actor handle, not {type(source).__name__}"
    )


def receive(sources: list[Any], timeout: float | None = None) -> list[tuple[Any, Signal]]:
    """Signals sent by `sources` since this process last received from them.

    Args:
        sources: ObjectRefs (each stands for the task that returns it) and actor handles.
        timeout: seconds to wait for at least one signal; None waits forever.

    Returns:
        ``(source, signal)`` pairs, per source in the order sent; empty on timeout.
    """
    rt = _rt.get_runtime()
    ids = [_source_id(s) for s in sources]
    nxt = [signal_id(i, _cursors.get(i, 0) + 1) for i in ids]
    unique = list(dict.fromkeys(nxt))
    ready_flags = rt.client.wait(unique, 1, timeout)
    if not any(ready_flags):
        return []
    out: list[tuple[Any, Signal]] = []
    for source, sid in zip(sources, ids):
        while True:
            index = _cursors.get(sid, 0) + 1
            oid = signal_id(sid, index)
            if not rt.client.contains(oid):
                break
            [value] = rt.get([ObjectRef(oid)], 10)
            _cursors[sid] = index
            out.append((source, value))
    return out


def reset() -> None:
    """Forget this process's cursors: the next receive starts from each source's first."""
    _cursors.clear()
