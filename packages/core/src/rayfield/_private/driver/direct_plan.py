"""Which path an actor handle's next call takes: the node's, or direct to the actor's worker.

A pure state machine (no I/O, no lock: the handle's lock is held around each method), so
its rules are unit-tested without processes:

* A handle starts on the node's path. After ``probe_after`` calls there it asks once
  (``Choice.probe``) whether the actor's worker serves direct calls; the caller looks
  and reports with :meth:`DirectPlan.probed`. A failed look is tried again after twice
  as many node calls (up to ``MAX_PROBE_GAP``), so an actor that never serves them
  costs almost nothing.
* With a connection up, a call goes direct when it may (``eligible``: every argument
  inline, no ObjectRef or actor handle in them, at least one return) and the node has
  finished the calls sent its way before (its last call's first return is sealed here:
  the actor runs a caller's calls in order, so the earlier ones are done too). Calls
  stay in order that way: direct calls never overtake node calls.
* A call that may not go direct while direct calls are unanswered first waits for their
  replies (``Choice.drain``), so node calls never overtake direct calls either.
* A lost connection (:meth:`DirectPlan.lost`, after the caller resubmitted the
  unanswered calls through the node) sends calls through the node again and looks
  again later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_PROBE_GAP", "PROBE_AFTER", "Choice", "DirectPlan"]

PROBE_AFTER = 8  # node calls of a handle before it looks for a direct path
MAX_PROBE_GAP = 4096  # the most node calls between two looks


@dataclass(frozen=True)
class Choice:
    """Where a call goes. ``direct``: to the worker; else through the node, after the
    direct calls in flight are answered when ``drain``, starting a look for the worker
    when ``probe``."""

    direct: bool
    drain: bool = False
    probe: bool = False


class DirectPlan:
    """The path state of one actor handle."""

    def __init__(self, probe_after: int = PROBE_AFTER) -> None:
        self.node_calls = 0  # calls sent through the node so far
        self.probe_at = probe_after  # look for the worker at this many node calls
        self.gap = probe_after
        self.probing = False
        self.connected = False  # a connection to the worker is up
        self.direct = False  # calls go direct now
        self.unacked = 0  # direct calls without a reply yet
        self.direct_calls = 0  # direct calls sent in all
        self.last_node_return: bytes | None = None  # first return of the last node call
        self.node_unknown = False  # a node call without returns is not known done

    def choose(self, eligible: bool, node_done: Callable[[bytes], bool]) -> Choice:
        """The path of the next call. ``node_done(object_id)``: whether that return of
        a node call is sealed here (asked only while switching to direct)."""
        if self.direct:
            if eligible:
                return Choice(direct=True)
            self.direct = False
            return self._node(drain=self.unacked > 0)
        if self.connected and eligible and self._node_quiet(node_done):
            self.direct = True
            return Choice(direct=True)
        return self._node(drain=False)

    def _node_quiet(self, node_done: Callable[[bytes], bool]) -> bool:
        if self.node_unknown:
            return False
        if self.last_node_return is not None:
            if not node_done(self.last_node_return):
                return False
            self.last_node_return = None
        return True

    def _node(self, drain: bool) -> Choice:
        self.node_calls += 1
        probe = not (self.connected or self.probing) and self.node_calls >= self.probe_at
        self.probing = self.probing or probe
        return Choice(direct=False, drain=drain, probe=probe)

    def sent_direct(self) -> None:
        """A direct call was sent."""
        self.unacked += 1
        self.direct_calls += 1

    def sent_node(self, first_return: bytes | None) -> None:
        """A node call was sent; ``first_return``: its first return id (None: it has none)."""
        self.last_node_return = first_return
        self.node_unknown = first_return is None

    def acked(self, n: int) -> None:
        """``n`` direct calls were answered."""
        self.unacked = max(0, self.unacked - n)

    def probed(self, connected: bool) -> None:
        """The look for the worker ended: a connection is up, or none could be made."""
        self.probing = False
        self.connected = connected
        if not connected:
            self._back_off()

    def lost(self) -> None:
        """The connection was lost; its unanswered calls went through the node."""
        self.connected = self.direct = False
        self.unacked = 0
        self._back_off()

    def _back_off(self) -> None:
        self.gap = min(self.gap * 2, MAX_PROBE_GAP)
        self.probe_at = self.node_calls + self.gap
