"""The object fetch logic of a node as a pure state machine: events in, actions out.

A node fetches objects a local client waits for but the node lacks. :class:`FetchState`
holds what is wanted, what is being fetched, and where objects are being made; each of
its methods takes one event (a client waits for an object, a long poll answered, a pull
ended, the directory answered...) with the current time, updates the state and returns
the actions the caller must carry out: :class:`Wake` the fetch loop, :class:`Poll` a node
(a long poll of the node making the objects), :class:`Fetch` an object from given nodes,
:class:`LookUp` objects in the GCS directory, :class:`Lost` (fail an object nobody can
make again), :class:`Recorded` (a copy is here now: record it in the directory),
:class:`Release` (the node that made a result may drop it) and :class:`Discard` (a result
its owner freed unread is made: the node that made it frees it). It does no I/O, starts no
thread and takes no lock: ``object_manager.py`` drives it under its lock, and the unit
tests drive it with plain calls.

Where an object is asked for, in order:

* the node a task was forwarded to for its results (``made_at``), by a long poll that
  brings small objects back whole;
* code ids (``is_code``): the GCS key-value store, then every node;
* the GCS object directory, then every alive node (``LookUp``).

A result made elsewhere whose owner frees it before reading it (an actor call whose
result is never passed to ``get``) is *abandoned* (:meth:`FetchState.freed`): its maker is still
long-polled, but once it is made there it is not copied here; a :class:`Discard` tells
the maker to free it and the caller that its task ran (argument pins and the spec kept
for recovery go), so neither node keeps anything of it. When a driver of this node exits,
the results of its calls still being made elsewhere are abandoned the same way
(:meth:`FetchState.job_gone`): as in Ray, an object whose owner died is lost.

An object found nowhere is asked for again after a delay that doubles from
``FIRST_LOOKUP_S`` to ``MAX_BACKOFF_S``. One whose owner node (the node of the process that
made it) is dead is failed as lost once two rounds agree that no alive node has it.

Sources:
    The event/action split follows the worker state machine of dask.distributed
    (``distributed.worker_state_machine.WorkerState``): Dask Development Team, *Dask:
    Library for dynamic task scheduling*, 2016, https://dask.org.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rayfield._private.common.ids import JOB_ID_BYTES

__all__ = [
    "FIRST_LOOKUP_S",
    "LOST_ROUNDS",
    "MAX_BACKOFF_S",
    "Action",
    "Discard",
    "Fetch",
    "FetchState",
    "LookUp",
    "Lost",
    "Poll",
    "Recorded",
    "Release",
    "Wake",
]

FIRST_LOOKUP_S = 0.1  # most objects a client waits for are being made here
MAX_BACKOFF_S = 2.0
LOST_ROUNDS = 2  # rounds that must find an orphaned object nowhere before it is lost
FREED_EARLY_MAX = 1 << 16  # ids freed before this node knew where they are made


@dataclass(frozen=True, slots=True)
class Wake:
    """Run the fetch loop now (something is due)."""


@dataclass(frozen=True, slots=True)
class Poll:
    """Long-poll the node at ``address`` for ``object_ids`` it is making; report with
    :meth:`FetchState.poll_done`."""

    address: str
    object_ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Fetch:
    """Copy ``object_id`` from the first of ``addresses`` that has it (none given: a code
    id, from the GCS first); report with :meth:`FetchState.fetch_done`."""

    object_id: bytes
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LookUp:
    """Find ``object_ids`` in the GCS directory, else by asking every alive node; report
    with :meth:`FetchState.found` and :meth:`FetchState.not_found`, then
    :meth:`FetchState.looked_up` (until then they are not looked up again)."""

    object_ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Lost:
    """No alive node holds ``object_id`` and its owner node is dead: store a LOST error."""

    object_id: bytes


@dataclass(frozen=True, slots=True)
class Recorded:
    """``object_id`` is here now: record this node in the GCS object directory."""

    object_id: bytes


@dataclass(frozen=True, slots=True)
class Release:
    """The node at ``address`` may drop its hold on ``object_id`` (a pulled result)."""

    address: str
    object_id: bytes


@dataclass(frozen=True, slots=True)
class Discard:
    """``object_id``, a result its owner here freed unread, is made at the node at
    ``address``: tell that node to free it, and treat its task as done (``listed``: the
    directory lists it there, a row to forget)."""

    address: str
    object_id: bytes
    listed: bool


Action = Wake | Poll | Fetch | LookUp | Lost | Recorded | Release | Discard


class FetchState:
    """What this node wants, fetches and expects; see the module docstring.

    Args:
        is_code: whether an id is a code id (``code_exports.is_code``).
    """

    def __init__(self, is_code: Callable[[bytes], bool]) -> None:
        self.is_code = is_code
        self.wanted: dict[bytes, tuple[float, float]] = {}  # id -> (next try, backoff)
        self.inflight: set[bytes] = set()  # ids a Fetch runs for
        self.backoff: dict[bytes, float] = {}  # id -> its backoff, while its Fetch runs
        self.polling: set[str] = set()  # addresses a Poll runs for
        self.looking: set[bytes] = set()  # ids a LookUp runs for
        self.made_at_: dict[bytes, str] = {}  # id -> address of the node making it
        self.unlisted: set[bytes] = set()  # made_at ids whose copy here is not recorded
        self.abandoned: set[bytes] = set()  # made_at ids freed here unread: not copied
        # ids freed before a made_at (a call still queued here): abandoned once it comes
        self.freed_early: OrderedDict[bytes, None] = OrderedDict()
        self.held: set[bytes] = set()  # results made here for other nodes' tasks
        self.announced: dict[bytes, str] = {}  # large objects a peer holds for us -> it
        self.code_from_peers: set[bytes] = set()  # code ids the GCS did not have
        self.lost_strikes: dict[bytes, int] = {}  # id -> rounds found nowhere, owner dead

    # ---- what is wanted ---------------------------------------------------------------

    def missing(self, object_id: bytes, now: float) -> list[Action]:
        """A local client waits for ``object_id``, which the node lacks."""
        if object_id in self.held:
            return []  # made here, by a forwarded task
        return self.want(object_id, now, self.made_at_.get(object_id))

    def want(
        self, object_id: bytes, now: float, hint: str | None = None, delay_s: float = 0.0
    ) -> list[Action]:
        """Fetch ``object_id`` (from the node at ``hint`` first, if given) after
        ``delay_s`` seconds; an object being fetched or wanted already is left as it is.

        Without a hint the first try waits at least ``FIRST_LOOKUP_S`` (the object may be
        being made here), except for code, which is asked of the GCS at once. An object
        whose holder announced it (``announced``) is pulled from that holder at once.
        """
        if object_id in self.inflight or object_id in self.wanted:
            return []
        if hint is not None:
            self.made_at_.setdefault(object_id, hint)
        holder = self.announced.pop(object_id, None)
        if holder is not None:
            return self.start_fetch(object_id, [holder])
        if hint is None and not self.is_code(object_id):
            delay_s = max(delay_s, FIRST_LOOKUP_S)
        self.wanted[object_id] = (now + delay_s, FIRST_LOOKUP_S)
        return [Wake()] if delay_s <= 0 else []

    def made_at(
        self, object_id: bytes, address: str, now: float, listed: bool = True
    ) -> list[Action]:
        """``object_id`` will be made by the node at ``address``: ask there, now, if it
        is wanted. ``listed`` False: the directory does not list it (a result of an actor
        call, which only this node asks for): its copy here is not recorded either when it
        comes back from there (another node that wants it finds it by asking the nodes)."""
        self.made_at_[object_id] = address
        if not listed:
            self.unlisted.add(object_id)
        if self.freed_early.pop(object_id, 0) is None:  # freed already: abandoned
            return self.freed(object_id, now, copy_here=False)
        if object_id in self.wanted:
            self.wanted[object_id] = (now, FIRST_LOOKUP_S)
            return [Wake()]
        return []

    def hold(self, object_ids: Iterable[bytes]) -> None:
        """``object_ids`` are results this node makes for another node's task."""
        self.held.update(object_ids)

    def unhold(self, object_ids: Iterable[bytes]) -> list[bytes]:
        """Those of ``object_ids`` held here, no longer held (the caller unpins them)."""
        mine = [oid for oid in object_ids if oid in self.held]
        self.held.difference_update(mine)
        return mine

    def announced_by(self, object_id: bytes, sender: str) -> list[Action]:
        """The node at ``sender`` holds ``object_id`` for this node (too large to push):
        fetch it now if it is wanted, else at once when it is."""
        self.made_at_.setdefault(object_id, sender)
        if object_id in self.wanted:
            return self.start_fetch(object_id, [sender])
        self.announced[object_id] = sender
        return []

    def freed(self, object_id: bytes, now: float, *, copy_here: bool) -> list[Action]:
        """The owner of ``object_id`` freed it. Nothing here waits for it any more; one
        being made on another node is abandoned: polled there until it is made, then
        discarded (see the module docstring). One freed while no copy was here
        (``copy_here`` False) that this node sends elsewhere only later (a call queued
        here) is abandoned when it is sent (:meth:`made_at`; the newest
        ``FREED_EARLY_MAX`` such ids are kept). One whose copy was here (``copy_here``:
        made or stored here, its call no longer queued) is not remembered: no call of
        this node sends it anywhere later, and on a node whose drivers free every result
        they read, remembering those would fill the table to its bound for nothing."""
        self.wanted.pop(object_id, None)
        self.announced.pop(object_id, None)
        if object_id not in self.made_at_:  # made here, or not sent anywhere yet
            if copy_here:
                return []
            self.freed_early[object_id] = None
            while len(self.freed_early) > FREED_EARLY_MAX:
                self.freed_early.popitem(last=False)
            return []
        if object_id in self.abandoned:
            return []
        self.abandoned.add(object_id)
        if object_id in self.inflight:
            return []  # a fetch of it runs: it arrives, and its maker is released
        self.wanted[object_id] = (now, FIRST_LOOKUP_S)
        return [Wake()]

    def job_gone(self, job_id: bytes, now: float) -> list[Action]:
        """The driver of ``job_id`` (a 12-byte job id, the prefix of every id its process
        made) exited: nothing here waits for its objects any more, and the results of its
        tasks and calls being made on other nodes are abandoned as if it had freed each
        one (:meth:`freed`), so their makers free them once made."""
        for oid in [o for o in self.wanted if o[:JOB_ID_BYTES] == job_id]:
            if oid not in self.made_at_:  # those made elsewhere: freed() below
                del self.wanted[oid]
        mine = [o for o in self.made_at_ if o[:JOB_ID_BYTES] == job_id]
        return [a for oid in mine for a in self.freed(oid, now, copy_here=False)]

    def here(self, object_id: bytes) -> None:
        """``object_id`` was found in the local store, or nothing here waits for it any
        more: it is no longer wanted."""
        self.wanted.pop(object_id, None)

    # ---- the fetch loop -----------------------------------------------------------------

    def due(self, now: float) -> tuple[list[bytes], list[bytes]]:
        """The wanted ids due now, split into ``(hinted, to_check)``: those whose maker is
        known, and those the caller checks in the local store first (it reports the ones
        found with :meth:`here`). Ids whose maker's long poll runs wait for the next one,
        and ids being looked up for the end of their lookup."""
        hinted, to_check = [], []
        for oid, (t, _) in self.wanted.items():
            if t > now or oid in self.looking:
                continue
            hint = self.made_at_.get(oid)
            if hint is None:
                to_check.append(oid)
            elif hint not in self.polling:
                hinted.append(oid)
        return hinted, to_check

    def plan(self, due: Iterable[bytes]) -> list[Action]:
        """Actions for the ``due`` ids (from :meth:`due`, those found here dropped): code
        is fetched (GCS first), an object being made at a known node is long-polled there
        (one poll a node), the rest is looked up."""
        actions: list[Action] = []
        by_hint: dict[str, list[bytes]] = {}
        rest: list[bytes] = []
        for oid in due:
            if oid not in self.wanted:
                continue
            if self.is_code(oid) and oid not in self.code_from_peers:
                actions += self.start_fetch(oid, [])
                continue
            hint = self.made_at_.get(oid)
            if hint is not None:
                by_hint.setdefault(hint, []).append(oid)
            else:
                rest.append(oid)
        for address, ids in by_hint.items():
            if address in self.polling:
                continue  # its long poll is running; these wait for the next one
            self.polling.add(address)
            for oid in ids:
                self.wanted.pop(oid, None)
            actions.append(Poll(address, tuple(ids)))
        if rest:
            self.looking.update(rest)
            actions.append(LookUp(tuple(rest)))
        return actions

    def looked_up(self, object_ids: Iterable[bytes]) -> None:
        """A :class:`LookUp` of ``object_ids`` ended (after its ``found`` and
        ``not_found``): those still wanted are due again at their time."""
        self.looking.difference_update(object_ids)

    def found(self, object_id: bytes, addresses: Iterable[str]) -> list[Action]:
        """The directory, or an alive node asked, says ``addresses`` hold ``object_id``."""
        addresses = list(addresses)
        return self.start_fetch(object_id, addresses) if addresses else []

    def not_found(
        self, object_ids: Iterable[bytes], orphaned: set[bytes], now: float
    ) -> list[Action]:
        """``object_ids`` were found nowhere this round; ``orphaned``: those of them whose
        owner node is dead and that are not here. An orphaned one found nowhere in
        ``LOST_ROUNDS`` rounds in a row is :class:`Lost`; the others are asked for again
        after a doubled delay."""
        actions: list[Action] = []
        for oid in object_ids:
            if oid not in orphaned or oid not in self.wanted or oid in self.made_at_:
                self.lost_strikes.pop(oid, None)
            else:
                strikes = self.lost_strikes[oid] = self.lost_strikes.get(oid, 0) + 1
                if strikes >= LOST_ROUNDS:
                    del self.lost_strikes[oid]
                    del self.wanted[oid]
                    actions.append(Lost(oid))
                    continue
            if oid in self.wanted:
                backoff = min(MAX_BACKOFF_S, self.wanted[oid][1] * 2)
                self.wanted[oid] = (now + backoff, backoff)
        return actions

    # ---- fetches and polls --------------------------------------------------------------

    def start_fetch(self, object_id: bytes, addresses: Iterable[str]) -> list[Action]:
        """Fetch ``object_id`` from ``addresses`` unless a fetch of it runs already."""
        if object_id in self.inflight:
            return []
        entry = self.wanted.pop(object_id, None)
        if entry is not None:
            self.backoff[object_id] = entry[1]
        self.inflight.add(object_id)
        return [Fetch(object_id, tuple(addresses))]

    def code_not_in_gcs(self, object_id: bytes) -> None:
        """The GCS does not have the code ``object_id`` (too big to export): from now on it
        is looked up on the nodes like any object."""
        self.code_from_peers.add(object_id)

    def fetch_done(
        self, object_id: bytes, got: bool, now: float, retry: bool = True
    ) -> list[Action]:
        """A :class:`Fetch` ended: ``got`` the object (or it was made here meanwhile), or
        not; one that did not get it is wanted again after a doubled delay (``retry``
        False: not, the fetch failed unexpectedly)."""
        self.inflight.discard(object_id)
        backoff = self.backoff.pop(object_id, FIRST_LOOKUP_S / 2)
        if not got and retry:
            delay = min(MAX_BACKOFF_S, 2 * backoff)
            self.wanted[object_id] = (now + delay, delay)
        return []

    def poll_done(
        self, address: str, present: dict[bytes, bool], stored: set[bytes], now: float
    ) -> list[Action]:
        """A :class:`Poll` of the node at ``address`` answered: ``present`` tells, for each
        id asked, whether that node holds it; ``stored``: those that came whole in the
        reply and are stored here now (the caller reported them with :meth:`arrived`).
        Those present but not stored are fetched from there; the others are wanted again:
        at once when something came (more are likely done), else shortly."""
        self.polling.discard(address)
        got = any(present.values())
        soon = now + (0.0 if got else 0.01)
        actions: list[Action] = []
        for oid, is_there in present.items():
            if oid in stored:
                continue
            if is_there and oid in self.abandoned:
                self.abandoned.discard(oid)
                self.made_at_.pop(oid, None)
                listed = oid not in self.unlisted
                self.unlisted.discard(oid)
                actions.append(Discard(address, oid, listed))
            elif is_there:
                actions += self.start_fetch(oid, [address])
            elif oid not in self.inflight:
                self.wanted.setdefault(oid, (soon, FIRST_LOOKUP_S))
        if got:
            actions.append(Wake())
        return actions

    def arrived(self, object_id: bytes, address: str, release: bool) -> list[Action]:
        """``object_id`` came from the node at ``address`` and is stored here: record the
        copy (not for an unlisted result back from its maker: see :meth:`made_at`) and,
        for a pulled result of a task forwarded there (``release``), let that node drop
        it."""
        self.wanted.pop(object_id, None)
        self.announced.pop(object_id, None)
        self.abandoned.discard(object_id)
        maker = self.made_at_.pop(object_id, None)
        unlisted = object_id in self.unlisted
        if unlisted:
            self.unlisted.discard(object_id)
        back = maker == address and release
        actions: list[Action] = [] if unlisted and back else [Recorded(object_id)]
        if back:
            actions.append(Release(address, object_id))
        return actions

    def node_died(self, address: str) -> None:
        """The node at ``address`` died: what it was making is looked up anew."""
        for oid in [o for o, a in self.made_at_.items() if a == address]:
            del self.made_at_[oid]
            self.unlisted.discard(oid)
            if oid in self.abandoned:  # nobody wants it: not looked for elsewhere
                self.abandoned.discard(oid)
                self.wanted.pop(oid, None)
