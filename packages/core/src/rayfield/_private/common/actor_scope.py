"""Actor lifetime by handles: an unnamed, non-detached actor ends when no handle remains.

Ray's rule, kept here: an actor lives while a handle to it exists anywhere in the cluster
(a driver, a task, another actor, an object in a store) or until its owner (the driver
that created it) dies; detached actors and named actors are exempt (``kill`` or their
owner's death ends a named one). The accounting has three levels.

* **Process** (:class:`HandleCounter`): each driver or worker counts its live
  ``ActorHandle`` objects per actor id and tells its node only of the changes 0 -> 1 and
  1 -> 0 (``StoreClient.actor_handles``, no reply). A process that dies drops its
  handles with its connection.
* **Node** (the native node, ``node_tasks.cc``): per actor, the number of holders here:
  client processes that hold a handle, tasks not finished yet (each task holds the actors
  whose handles are in its arguments, ``SubmitTaskRequest.actor_handles``, and an actor
  call holds its own actor), and objects in the store with handles inside (a put or a
  result: held until the store deletes the object). A task's holds end only when it
  finishes, after the worker that ran it registered the handles it deserialized (both go
  over the same socket, in order), so a handle passed along never leaves a gap. A task
  moved to another node hands its holds to the node's agent (``take_task``'s
  ``kept_handles``), which drops them once the task's results are back. The node reports
  the changes 0 -> 1 and 1 -> 0 of its total (``actor_handles`` events) to its host.
* **Cluster** (:class:`ActorScopes`, on each node's host): the actor's home is the node
  whose process created it (the first bytes of its id); only the home ends it. When the
  home holds no handle any more, it asks every alive node whether it holds one
  (``ActorsHeld`` of the node service, answered from the native counts) and ends the
  actor when none does. A node that drops its last handle to an actor of another home
  tells that home (``ActorsReleased``), which asks again; so does the death of a node.

Ending (``NodeServer.end_actor``) checks once more, under the node's lock, that no handle
appeared meanwhile, then kills the actor's worker with no restart (its calls are all done:
each call held the actor); an actor that moved to another node is killed there. Its
record in the GCS becomes DEAD like any other final death.

Limits: handles inside an object are counted on the node that stored it, until the
object is deleted there (freed by its owner or evicted); a copy pulled to another node
does not count by itself (a reader there counts once it deserializes the handle).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["NO_HANDLE_LEFT", "ActorScopes", "HandleCounter"]

NO_HANDLE_LEFT = (
    "the actor is dead: no handle to it remains in the cluster (an actor without a name "
    'ends with its last handle; give it a name or lifetime="detached" to keep it)'
)

# Decisions of ActorScopes: ("confirm", actor_id): ask every other node whether it holds a
# handle, then call ``confirmed``; ("end", actor_id): end it now; ("report", actor_id): tell
# the actor's home that this node holds no handle to it any more.
Decision = tuple[str, bytes]


class HandleCounter:
    """Live ``ActorHandle`` objects of this process per actor id; tells the node of the
    changes 0 -> 1 and 1 -> 0.

    Args:
        client: the process's ``StoreClient``.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._counts: dict[bytes, int] = {}
        # Reentrant: a garbage collection inside add() may drop another handle here.
        self._lock = threading.RLock()

    def add(self, actor_id: bytes, scoped: bool = False) -> None:
        """A handle to ``actor_id`` was made here; ``scoped``: the actor was just created
        and ends with its last handle."""
        with self._lock:
            n = self._counts.get(actor_id, 0)
            self._counts[actor_id] = n + 1
            if n == 0 or scoped:
                self._client.actor_handles([actor_id], True, None, scoped)

    def remove(self, actor_id: bytes) -> None:
        """A handle to ``actor_id`` was garbage collected."""
        with self._lock:
            n = self._counts.get(actor_id, 0) - 1
            if n > 0:
                self._counts[actor_id] = n
                return
            self._counts.pop(actor_id, None)
            if not self._client.closed:
                self._client.actor_handles([actor_id], False)

    def in_object(self, object_id: bytes, actor_ids: list[bytes]) -> None:
        """Handles to ``actor_ids`` are inside the object ``object_id`` about to be stored:
        the node counts them until it deletes the object."""
        self._client.actor_handles(actor_ids, True, object_id)


class ActorScopes:
    """The handle decisions of one node: a pure state machine (events in, decisions out).

    Args:
        is_home: whether an actor id was created by a process of this node.

    Call order: :meth:`local` for every ``actor_handles`` event of the native node;
    :meth:`peer_released` when another node says it dropped its last handle;
    :meth:`peers_changed` when a node died; :meth:`confirmed` with the answer of the
    other nodes after a ``"confirm"`` decision; :meth:`end_refused` when the native node
    found a handle at the last moment; :meth:`forget` when an actor died.
    """

    def __init__(self, is_home: Callable[[bytes], bool]) -> None:
        self.is_home = is_home
        self.scoped: set[bytes] = set()  # created here: they end with their last handle
        self.held: set[bytes] = set()  # this node holds a handle to them

    def local(self, actor_id: bytes, held: bool, scoped: bool) -> list[Decision]:
        """This node's count of handles to ``actor_id`` went 0 -> 1 (``held``) or 1 -> 0."""
        if scoped:
            self.scoped.add(actor_id)
        if held:
            self.held.add(actor_id)
            return []
        self.held.discard(actor_id)
        if actor_id in self.scoped:
            return [("confirm", actor_id)]
        if not self.is_home(actor_id):
            return [("report", actor_id)]
        return []

    def peer_released(self, actor_id: bytes) -> list[Decision]:
        """Another node holds no handle to ``actor_id`` any more."""
        if actor_id in self.scoped and actor_id not in self.held:
            return [("confirm", actor_id)]
        return []

    def peers_changed(self) -> list[Decision]:
        """A node died (its handles with it): ask again for every actor not held here."""
        return [("confirm", a) for a in sorted(self.scoped - self.held)]

    def confirmed(self, actor_id: bytes, held_elsewhere: bool) -> list[Decision]:
        """The other nodes answered: ``held_elsewhere`` when one of them (or one that did
        not answer) may hold a handle."""
        if actor_id not in self.scoped or actor_id in self.held or held_elsewhere:
            return []
        self.scoped.discard(actor_id)
        return [("end", actor_id)]

    def end_refused(self, actor_id: bytes) -> None:
        """The native node found a handle when asked to end ``actor_id``: it stays."""
        self.scoped.add(actor_id)

    def forget(self, actor_id: bytes) -> None:
        """``actor_id`` is dead for good."""
        self.scoped.discard(actor_id)
        self.held.discard(actor_id)
