"""Which objects of this node have copies on other nodes, and what to do when one goes.

Pure bookkeeping (no I/O, no threads, no clock): :class:`~.object_frees.ObjectFrees`
feeds it and carries out what it answers.

An object is *freed* when its owner is done with it: the owner's process frees it in its
node's store (``RefTracker``; the store then deletes it once nothing there references
it), and that store reports the removal as ``deleted``. Every other copy is garbage from
then on. A copy the store drops to make room is reported as ``evicted``: only that copy
went, the object lives on.

The book records, per object id:

* ``recorded``: this node recorded itself as a holder in the GCS object directory (a
  copy came here from another node);
* ``peers``: the addresses of the nodes known to hold or to be getting a copy (the node
  it came from, the nodes it was pushed or announced to).

And decides, when the local copy goes (:meth:`CopyBook.gone`):

* evicted: forget this node's row in the directory if it recorded one;
* deleted (freed here): every row of the object in the directory goes; an object of
  ``large_bytes`` or more (one that crossed nodes as a pull, not inline) is also freed on
  the ``peers`` and on the holders the directory names (:class:`Freed` with ``ask_gcs``),
  so their stores reuse the memory at once instead of filling up with dead copies. A
  small one is left to the other stores' LRU (inline copies are cheap, and a message per
  small object would cost more than it saves).

An object this node frees because another node said so (:meth:`CopyBook.freed_elsewhere`)
is forgotten first and marked quiet, so its removal here says nothing to anyone. Entries
go when the local copy goes, so the book holds no more ids than the store does, plus at
most ``QUIET_MAX`` quiet ones (the oldest are dropped: those whose copy never came).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["CopyBook", "Freed", "Unrecord"]

LARGE_BYTES = 1 << 20  # objects this size or larger are freed on the other nodes too
QUIET_MAX = 1 << 16  # ids freed by another node whose removal here is awaited


@dataclass(frozen=True)
class Unrecord:
    """Forget this node's row of ``object_id`` in the directory (its copy was evicted)."""

    object_id: bytes


@dataclass(frozen=True)
class Freed:
    """``object_id`` was freed here: forget every row of it in the directory (``recorded``:
    this node wrote one); with ``peers`` or ``ask_gcs``, tell those nodes (and the holders
    the directory names) to drop their copies."""

    object_id: bytes
    peers: frozenset[str]
    ask_gcs: bool
    recorded: bool


class CopyBook:
    """Copies of this node's objects elsewhere; see the module docstring.

    Args:
        large_bytes: objects of this size or larger are freed on the other nodes too.
    """

    def __init__(self, large_bytes: int = LARGE_BYTES) -> None:
        self.large_bytes = large_bytes
        self.recorded: set[bytes] = set()
        self.peers: dict[bytes, set[str]] = {}
        self.quiet: OrderedDict[bytes, None] = OrderedDict()  # freed by another node (oldest first)

    def record(self, object_ids: Iterable[bytes]) -> None:
        """This node recorded itself in the directory as a holder of ``object_ids``."""
        self.recorded.update(object_ids)

    def copied(self, object_ids: Iterable[bytes], address: str) -> None:
        """The node at ``address`` holds (or is getting) a copy of each of ``object_ids``:
        they came from there, or were pushed or announced there."""
        for oid in object_ids:
            self.peers.setdefault(oid, set()).add(address)

    def gone(self, object_id: bytes, evicted: bool, size: int) -> Unrecord | Freed | None:
        """The local copy of ``object_id`` (``size`` bytes) went: ``evicted`` (room was
        needed) or deleted (its owner freed it). What to do, if anything."""
        recorded = object_id in self.recorded
        self.recorded.discard(object_id)
        peers = self.peers.pop(object_id, None)
        if object_id in self.quiet:
            del self.quiet[object_id]
            return None  # freed by another node, which saw to the rest
        if evicted:
            return Unrecord(object_id) if recorded else None
        if size >= self.large_bytes:
            return Freed(object_id, frozenset(peers or ()), ask_gcs=True, recorded=recorded)
        if recorded:
            return Freed(object_id, frozenset(), ask_gcs=False, recorded=True)
        return None

    def freed_elsewhere(self, object_ids: Iterable[bytes]) -> list[bytes]:
        """Another node freed ``object_ids`` and told this one: forget them (their removal
        here is then nobody else's business). Those this node had recorded in the
        directory."""
        recorded = []
        for oid in object_ids:
            if oid in self.recorded:
                self.recorded.discard(oid)
                recorded.append(oid)
            self.peers.pop(oid, None)
            self.quiet[oid] = None
        while len(self.quiet) > QUIET_MAX:
            self.quiet.popitem(last=False)
        return recorded

    def node_died(self, address: str) -> None:
        """The node at ``address`` died: it holds nothing any more."""
        for oid in [o for o, where in self.peers.items() if address in where]:
            where = self.peers[oid]
            where.discard(address)
            if not where:
                del self.peers[oid]

    def __len__(self) -> int:
        """How many ids the book holds."""
        return len(self.recorded | self.peers.keys() | self.quiet.keys())
