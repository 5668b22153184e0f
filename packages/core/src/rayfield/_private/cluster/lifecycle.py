"""How actors and tasks end across nodes: final actor deaths, fate-sharing, remote cancel.

A node's agent (``agent.py``) hands this module three kinds of end:

* **An actor dies for good** (the native node's ``actor_died`` event: no restart left, killed,
  or it exited; or ``recovery.py`` cannot restart it after its node died): its GCS record
  becomes DEAD, so its name is free and ``get_actor(name)`` raises ValueError.
* **A driver disconnects** (exits or is killed): the native node kills the non-detached
  actors that driver created here; those it moved to other nodes come in an ``owner_died``
  event, and are killed on their node through the node service's ``KillActor``.
  Actors with ``lifetime="detached"`` are not touched. Its job is marked finished in the
  GCS (``client_disconnected``; a clean ``shutdown()`` did that already) and, when it
  ended without one, the tasks it submitted that have not started are cancelled on every
  node (``CancelJob``: task ids start with the job id; a node refuses to run those
  forwarded to it later).
* **An actor's last handle goes** (``_private/actor_scope.py``): the actor's home node (the
  node of the process that created it) asks every alive node whether it still holds a
  handle (``ActorsHeld``) and ends the actor when none does, where it lives; a node that
  drops its last handle to an actor of another home says so (``ActorsReleased``), and the
  death of a node makes the homes ask again.
* **A task is cancelled** that this node forwarded to another node: ``rayfield.cancel``
  finds no such task in its node's scheduler and asks its node's agent
  (``CancelTask`` of the node service, ``cancel_elsewhere``), which cancels it where it was
  forwarded (following forwards up to ``MAX_HOPS`` nodes). The node running it seals
  ``CANCELLED`` error objects under its returns; the origin fetches them as any result.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc

from rayfield._private.actor_scope import NO_HANDLE_LEFT, Decision
from rayfield._private.protocol.errors import GcsNotFoundError
from rayfield._private.protocol.types import ActorState

if TYPE_CHECKING:
    from rayfield._private.cluster.agent import NodeAgent

logger = logging.getLogger("rayfield")

__all__ = ["MAX_HOPS", "Lifecycle", "cancel_elsewhere", "job_cancelled"]

MAX_HOPS = 4  # a forwarded task is not moved again; this only bounds a pathological chain


class Lifecycle:
    """The ends of actors and tasks that involve other nodes, for one node's agent.

    Args:
        agent: the node's agent (its GCS client, store client, peers and records).
    """

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent
        self.scopes = agent.node.scopes  # the handle decisions (pure; under _scope_lock)
        self._scope_lock = threading.Lock()
        # Handle questions go to other nodes one at a time, off the event thread:
        self._scope_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rayfield-scope")

    # ---- actor handles ----------------------------------------------------------------

    def handles_changed(self, actor_id: bytes, held: bool, scoped: bool) -> None:
        """This node's count of handles to ``actor_id`` went 0 -> 1 or 1 -> 0."""
        with self._scope_lock:
            decisions = self.scopes.local(actor_id, held, scoped)
        self._act(decisions)

    def peers_released(self, actor_ids: list[bytes]) -> None:
        """Another node holds no handle to ``actor_ids`` any more (``ActorsReleased``)."""
        with self._scope_lock:
            decisions = [d for a in actor_ids for d in self.scopes.peer_released(a)]
        self._act(decisions)

    def peer_died(self) -> None:
        """A node died, with the handles it held: the actors homed here are asked for again."""
        with self._scope_lock:
            decisions = self.scopes.peers_changed()
        self._act(decisions)

    def _act(self, decisions: list[Decision]) -> None:
        for what, actor_id in decisions:
            fn = self._confirm if what == "confirm" else self._report
            try:
                self._scope_pool.submit(fn, actor_id)
            except RuntimeError:  # shutting down
                return

    def _report(self, actor_id: bytes) -> None:
        """Tell the actor's home node that this node dropped its last handle to it."""
        home = self.agent.home_of(actor_id)
        if home is None:
            return
        try:
            self.agent._stub(home).actors_released([actor_id])
        except grpc.RpcError as exc:
            logger.debug("could not tell %s of a released actor handle: %s", home, exc)

    def _confirm(self, actor_id: bytes) -> None:
        """Ask every alive node whether it holds a handle to ``actor_id``; end it if none
        does (a node that does not answer may hold one)."""
        held = False
        for peer in self.agent.alive_peers():
            try:
                held = self.agent._stub(peer.address).actors_held([actor_id])[0]
            except (grpc.RpcError, IndexError) as exc:
                logger.info("node %s did not say whether it holds a handle: %s", peer.address, exc)
                held = True
            if held:
                break
        with self._scope_lock:
            decisions = self.scopes.confirmed(actor_id, held)
        if not decisions:
            return
        outcome = self.agent.node.server.end_actor(actor_id, NO_HANDLE_LEFT)
        logger.info("actor %s has no handle left: %s", actor_id.hex()[:16], outcome)
        if outcome == "held":
            with self._scope_lock:
                self.scopes.end_refused(actor_id)
        elif outcome == "elsewhere":
            self._kill_orphan(actor_id, NO_HANDLE_LEFT)

    # ---- actors -----------------------------------------------------------------------

    def actor_died(self, actor_id: bytes, reason: str) -> None:
        """Record in the GCS that ``actor_id`` is dead for good (its name is free again).

        Runs the GCS call on the agent's transfer pool, off the caller's thread. An actor
        the GCS never recorded (unnamed, never moved) is skipped.
        """
        logger.info("actor %s is dead: %s", actor_id.hex()[:16], reason)
        with self._scope_lock:
            self.scopes.forget(actor_id)
        self._submit(self._mark_dead, actor_id)

    def _mark_dead(self, actor_id: bytes) -> None:
        try:
            self.agent.gcs.update_actor(actor_id, ActorState.DEAD)
        except GcsNotFoundError:
            pass
        except Exception as exc:
            logger.warning("could not record actor %s dead: %s", actor_id.hex()[:16], exc)

    def actor_state(self, actor_id: bytes, alive: bool) -> None:
        """An actor hosted here finished its creation (``alive``) or is being restarted:
        record it ALIVE on this node or RESTARTING in the GCS (a re-record keeps its name,
        owner and handle data; an actor the GCS did not know is recorded so)."""
        state = ActorState.ALIVE if alive else ActorState.RESTARTING
        self._submit(self._record, actor_id, state)

    def _record(self, actor_id: bytes, state: ActorState) -> None:
        from rayfield._private.protocol.types import ActorInfo

        info = ActorInfo(actor_id=actor_id, node_id=self.agent.node_id, state=state)
        try:
            self.agent.gcs.register_actor(info)
        except Exception as exc:
            logger.warning("could not record actor %s %s: %s", actor_id.hex()[:16], state.name, exc)

    def actors_restarted(self, actor_ids: list[bytes]) -> None:
        """Actors of a dead node are being created again from here: record them alive on
        this node (the GCS marked them dead with their node; a move elsewhere re-records
        them)."""
        for actor_id in actor_ids:
            try:
                self.agent.gcs.update_actor(actor_id, ActorState.ALIVE, self.agent.node_id)
            except GcsNotFoundError:
                pass
            except Exception as exc:
                logger.debug("could not record actor %s restarted: %s", actor_id.hex()[:16], exc)

    def cancel_forwarded(self, task_ids: list[bytes], force: bool) -> None:
        """A recursive cancel on this node reached ``task_ids``, tasks the cancelled one
        submitted that this node no longer holds: cancel (recursively) those it forwarded,
        on the nodes it sent them to (on the agent's transfer pool)."""
        for task_id in task_ids:
            if task_id in self.agent.recovery.sent:
                self._submit(self.cancel, task_id, force)

    def owner_died(self, pid: int, actor_ids: list[bytes]) -> None:
        """The driver ``pid`` of this node disconnected; ``actor_ids`` are the non-detached
        actors it created that were moved to other nodes: kill them there (on the
        agent's transfer pool)."""
        logger.info(
            "driver pid %d exited: killing its %d actor(s) on other nodes", pid, len(actor_ids)
        )
        why = (
            f"the actor is dead: the driver (pid {pid}) that created it exited, and a "
            "non-detached actor ends with its driver"
        )
        for actor_id in actor_ids:
            self._submit(self._kill_orphan, actor_id, why)

    def driver_gone(self, pid: int) -> None:
        """A driver connection of this node closed: its jobs are finished, and the tasks
        they left queued are cancelled on every node."""
        self._submit(self._driver_gone, pid)

    def _driver_gone(self, pid: int) -> None:
        from rayfield._private.cluster.jobs import finish_on_node

        for job_id in finish_on_node(self.agent.gcs, self.agent.node_id, pid):
            n = self.cancel_job(job_id)
            for peer in self.agent.alive_peers():
                try:
                    n += self.agent._stub(peer.address).cancel_job(job_id)
                except grpc.RpcError as exc:
                    logger.info(
                        "could not cancel job %s on %s: %s", job_id.hex(), peer.address, exc
                    )
            logger.info("driver pid %d exited: %d queued task(s) of it cancelled", pid, n)

    def cancel_job(self, job_id: bytes) -> int:
        """The driver of ``job_id`` is gone: cancel its tasks queued here, and those
        forwarded here from now on. Returns how many were cancelled."""
        self.agent.job_ended(job_id)
        return self.agent.node.server.cancel_job(job_id, job_cancelled(job_id))

    def close(self) -> None:
        self._scope_pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.agent._pool.submit(fn, *args)
        except RuntimeError:  # the agent is shutting down (its pool is closed)
            logger.debug("not run, the node is stopping: %s", getattr(fn, "__name__", fn))

    def _kill_orphan(self, actor_id: bytes, why: str) -> None:
        agent = self.agent
        agent.recovery.forget_actor(actor_id, why)  # not created again if its node dies
        agent.route_calls(actor_id)  # calls held here fail now
        address = agent._actor_address(actor_id)
        try:
            if address is None:  # created here again (its node died): kill it here
                agent.client.kill_actor(actor_id, True)
            elif not agent._stub(address).kill_actor(actor_id, True):
                logger.info("actor %s was not on %s any more", actor_id.hex()[:16], address)
        except Exception as exc:
            logger.info("could not kill actor %s: %s", actor_id.hex()[:16], exc)
        self._mark_dead(actor_id)

    # ---- tasks ------------------------------------------------------------------------

    def cancel(
        self, task_id: bytes, force: bool, hops: int = MAX_HOPS, recursive: bool = True
    ) -> str:
        """Cancel ``task_id`` here or where this node forwarded it; with ``recursive``,
        the tasks it submitted too (those forwarded from here come back in a
        ``cancel_elsewhere`` event, see ``cancel_forwarded``).

        Returns:
            ``"queued"`` (it will not run), ``"running"`` (running; stopped only with
            ``force``), or ``"done"`` (finished, or unknown to every node asked).
        """
        state = self.agent.client.cancel_task(task_id, force, recursive)
        if state != "done" or hops <= 0:
            return state
        sent = self.agent.recovery.sent.get(task_id)
        if sent is None:
            return state
        try:
            return self.agent._stub(sent.address).cancel_task(
                task_id, force, hops - 1, recursive=recursive
            )
        except grpc.RpcError as exc:
            logger.info("cancel of task %s on %s failed: %s", task_id.hex()[:16], sent.address, exc)
            return state


def job_cancelled(job_id: bytes) -> str:
    """The error text of a task cancelled because its driver exited."""
    return (
        f"the task was cancelled before it ran: the driver of job {job_id.hex()} that "
        "submitted it exited"
    )


def cancel_elsewhere(node_id: bytes, task_id: bytes, force: bool, recursive: bool = True) -> str:
    """``rayfield.cancel`` of a task this process's node no longer holds: ask that node's
    agent, which cancels it on the node it was forwarded to.

    Args:
        node_id: this process's node (where the task was submitted).
        recursive: also cancel the tasks it submitted.

    Returns:
        What the node running it answered (see ``Lifecycle.cancel``); ``"done"`` outside a
        cluster or when the node cannot be asked.
    """
    from rayfield._private.cluster.names import gcs_address, sessions_root
    from rayfield._private.driver.state_client import StateClient, StateError

    address = gcs_address()
    if not address:
        return "done"
    try:
        with StateClient(address, temp_dir=sessions_root()) as client:
            node = next((n for n in client.gcs.get_nodes() if n.node_id == node_id), None)
            if node is None or not node.alive:
                return "done"
            return client.node(node.address).cancel_task(task_id, force, recursive=recursive)
    except (StateError, grpc.RpcError) as exc:
        logger.warning("could not cancel task %s in the cluster: %s", task_id.hex()[:16], exc)
        return "done"
