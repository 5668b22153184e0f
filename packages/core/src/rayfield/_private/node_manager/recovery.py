"""What a node does when a node it sent work to dies.

The node that forwards work keeps its spec until a result comes back, so the work is
not lost with the node that ran it:

* a forwarded task is submitted again (and placed anew: here or on another node) while
  its ``max_retries`` allow, else its results become ``WORKER_DIED`` errors;
* an actor created on the dead node is created again (``max_restarts``; its calls that
  were in flight there run again on the new instance while the actor's
  ``max_task_retries`` allow, else they fail with ``ACTOR_DIED``, as for a local
  restart), else it is dead and every call to it fails with ``ACTOR_DIED``;
* results of finished tasks that lived only on the dead node are rebuilt the same way
  (lineage: the task is run again) when their task is still known here.

Every failure is an error object under the result's id, so a ``get`` raises a typed
error (``WorkerCrashedError``, ``ActorDiedError``) instead of hanging.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rayfield._private.common.ids import short
from rayfield._private.node_manager.task_spec import TaskSpec
from rayfield.store import StoreClient

logger = logging.getLogger("rayfield")


@dataclass(frozen=True, slots=True)
class Sent:
    """A task another node accepted: its spec and that node's address."""

    spec: TaskSpec
    address: str


class Recovery:
    """Records of work sent to other nodes, and the reaction to their death.

    Args:
        client: the agent's store client (error objects are put with it).
        resubmit: submits a spec to the local node again (it is then placed anew).
        on_actor_dead: told ``(actor_id, why)`` when an actor of a dead node cannot be
            created again (its death is final).
    """

    def __init__(
        self,
        client: StoreClient,
        resubmit: Callable[[TaskSpec], None],
        on_actor_dead: Callable[[bytes, str], None] | None = None,
    ) -> None:
        self.client = client
        self.resubmit = resubmit
        self.on_actor_dead = on_actor_dead
        self._lock = threading.Lock()
        self.sent: dict[bytes, Sent] = {}  # task id -> spec and where it went
        self.by_return: dict[bytes, bytes] = {}  # return id -> task id
        self.dead_actors: dict[bytes, str] = {}  # actor id -> why

    def record(self, spec: TaskSpec, address: str) -> None:
        """``spec`` was accepted by the node at ``address``."""
        self.record_many([spec], address)

    def record_many(self, specs: list[TaskSpec], address: str) -> None:
        """``specs`` were accepted by the node at ``address``."""
        with self._lock:
            for spec in specs:
                self.sent[spec.task_id] = Sent(spec, address)
                for rid in spec.return_ids:
                    self.by_return[rid] = spec.task_id

    def where_sent(self, task_id: bytes) -> str | None:
        """The address of the node that accepted ``task_id`` from this node, if any."""
        with self._lock:
            sent = self.sent.get(task_id)
        return None if sent is None else sent.address

    def result_here(self, object_id: bytes) -> None:
        """A result of sent work reached this node: its task need not run again."""
        self.results_here([object_id])

    def results_here(self, object_ids: Iterable[bytes]) -> list[bytes]:
        """Results of sent work reached this node: their tasks need not run again.
        Returns the actor of each actor call among them whose last result this was."""
        done: list[bytes] = []
        with self._lock:
            for object_id in object_ids:
                task_id = self.by_return.pop(object_id, None)
                sent = self.sent.get(task_id) if task_id is not None else None
                if sent is None or sent.spec.actor_creation:
                    continue  # a creation stays: the actor may have to be recreated
                if not any(r in self.by_return for r in sent.spec.return_ids):
                    del self.sent[sent.spec.task_id]
                    if sent.spec.actor_id:
                        done.append(sent.spec.actor_id)
        return done

    def node_died(self, address: str) -> list[bytes]:
        """React to the death of the node at ``address``; returns the ids of the actors
        that are being created again (their location is unknown until placed)."""
        with self._lock:
            lost = [s for s in self.sent.values() if s.address == address]
            for s in lost:
                del self.sent[s.spec.task_id]
                for rid in s.spec.return_ids:
                    self.by_return.pop(rid, None)
        restarted = []
        why = f"the node {address} that ran it died"
        lost.sort(key=lambda s: not s.spec.actor_creation)  # creations first, then calls
        for s in lost:
            spec = s.spec
            if spec.actor_creation and spec.actor_id is not None:
                if self._restart_actor(spec, address):
                    restarted.append(spec.actor_id)
            elif spec.actor_id:
                if spec.max_retries != 0 and spec.actor_id in restarted:
                    logger.warning("actor call %s is run again: %s", short(spec.task_id), why)
                    self.resubmit(spec.replace(max_retries=_one_less(spec.max_retries)))
                else:
                    self.fail(
                        list(spec.return_ids), "ACTOR_DIED", f"the actor's node {address} died"
                    )
            elif spec.max_retries != 0:
                logger.warning("task %s is run again: %s", short(spec.task_id), why)
                self.resubmit(spec.replace(max_retries=_one_less(spec.max_retries)))
            else:
                self.fail(list(spec.return_ids), "WORKER_DIED", f"{why}; no retries left")
        return restarted

    def _restart_actor(self, spec: TaskSpec, address: str) -> bool:
        actor_id = spec.actor_id
        assert actor_id is not None
        if spec.max_retries == 0:
            why = f"the actor is dead: its node {address} died and no restart is left"
            with self._lock:
                self.dead_actors[actor_id] = why
            if self.on_actor_dead is not None:
                self.on_actor_dead(actor_id, why)
            return False
        logger.warning("actor %s is created again: its node %s died", short(actor_id), address)
        # Its first result was awaited once; a restart's result is not.
        self.resubmit(spec.replace(max_retries=_one_less(spec.max_retries), return_ids=()))
        return True

    def forget_actor(self, actor_id: bytes, why: str) -> None:
        """The actor sent elsewhere was ended on purpose: never create it again, and fail
        its calls with ``why``."""
        with self._lock:
            self.dead_actors[actor_id] = why
            for task_id in [
                t
                for t, s in self.sent.items()
                if s.spec.actor_creation and s.spec.actor_id == actor_id
            ]:
                for rid in self.sent.pop(task_id).spec.return_ids:
                    self.by_return.pop(rid, None)

    def actor_dead(self, actor_id: bytes) -> str | None:
        with self._lock:
            return self.dead_actors.get(actor_id)

    def fail(self, object_ids: Iterable[bytes], tag: str, message: str) -> None:
        """Store an error object (``tag`` as metadata) under each id not stored yet."""
        for oid in object_ids:
            logger.debug("%s error for %s: %s", tag, oid.hex(), message)
            try:
                self.client.put(oid, message.encode(), tag.encode())
            except Exception as exc:
                logger.debug("error object for %s: %s", short(oid), exc)


def _one_less(max_retries: int) -> int:
    """Retries left after one (-1: no limit, stays -1)."""
    return max_retries - 1 if max_retries > 0 else max_retries
