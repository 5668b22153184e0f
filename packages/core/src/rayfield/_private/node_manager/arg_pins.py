"""The arguments a node keeps pinned for tasks it sent to other nodes.

``NodeServer.take_task`` hands a taken task's argument pins to the agent's store client
(``TakenTask.kept_pins``): the arguments must outlive the trip, since the receiving node
may pull them. :class:`ArgPins` records, per task sent elsewhere, its pins and the
results still to come back; once every result is here (or failed), or the receiving node
died, it returns the pins for the caller to unpin. It does no I/O and takes no lock (the
agent calls it under its lock).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ArgPins"]


@dataclass(slots=True)
class _Entry:
    address: str
    pins: tuple[bytes, ...]
    returns: set[bytes] = field(default_factory=set)


class ArgPins:
    """Argument pins of tasks sent elsewhere, until their results are back."""

    def __init__(self) -> None:
        self._tasks: dict[bytes, _Entry] = {}  # task id -> where it went, pins, returns to come
        self._by_return: dict[bytes, bytes] = {}  # return id -> task id

    def __len__(self) -> int:
        return len(self._tasks)

    def hold(
        self, task_id: bytes, address: str, pins: tuple[bytes, ...], return_ids: tuple[bytes, ...]
    ) -> None:
        """Keep ``pins`` until every one of ``return_ids`` is back (``result_back``).

        Raises:
            ValueError: ``return_ids`` is empty (nothing would release the pins).
        """
        if not return_ids:
            raise ValueError("a task without results cannot hold its arguments")
        self._tasks[task_id] = _Entry(address, pins, set(return_ids))
        for rid in return_ids:
            self._by_return[rid] = task_id

    def result_back(self, object_id: bytes) -> tuple[bytes, ...]:
        """A result of a sent task is here (or failed). Returns the pins to drop: the
        task's, when it was its last result to come back; else none."""
        task_id = self._by_return.pop(object_id, None)
        entry = self._tasks.get(task_id) if task_id is not None else None
        if entry is None:
            return ()
        entry.returns.discard(object_id)
        if entry.returns:
            return ()
        del self._tasks[task_id]  # type: ignore[arg-type]
        return entry.pins

    def node_died(self, address: str) -> list[tuple[bytes, ...]]:
        """The node at ``address`` died: the pins of each task sent there, to drop one
        unpin a task (its tasks were submitted again, which pins their arguments anew, or
        failed)."""
        lost = [t for t, e in self._tasks.items() if e.address == address]
        pins = []
        for task_id in lost:
            entry = self._tasks.pop(task_id)
            for rid in entry.returns:
                self._by_return.pop(rid, None)
            pins.append(entry.pins)
        return pins
