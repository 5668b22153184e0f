"""How actors and tasks end across nodes: final actor deaths, fate-sharing, remote cancel.

A node's agent (``agent.py``) hands this module these kinds of end:

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
* **An actor's last handle goes** (``_private/common/actor_scope.py``): the actor's home node (the
  node of the process that created it) asks every alive node whether it still holds a
  handle (``ActorsHeld``) and ends the actor when none does, where it lives; a node that
  drops its last handle to an actor of another home says so (``ActorsReleased``), and the
  death of a node makes the homes ask again.
* **A task is cancelled** that this node forwarded to another node: ``rayfield.cancel``
  finds no such task in its node's scheduler and asks its node's agent
  (``CancelTask`` of the node service, from ``_private/driver/remote_cancel.py``), which
  cancels it where it was forwarded (following forwards up to ``MAX_HOPS`` nodes). The
  node running it seals ``CANCELLED`` error objects under its returns; the origin
  fetches them as any result.

Actor records (alive, restarting, dead) go to the GCS through the node's
:class:`~.gcs_writer.GcsWriter`: in order, off the caller's thread, and kept until the
GCS takes them when it is down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from rayfield._private.common.actor_scope import NO_HANDLE_LEFT, ActorScopes, Decision
from rayfield._private.common.ids import short
from rayfield._private.gcs.client import GcsClient
from rayfield._private.node_manager.actor_routing import ActorRouter
from rayfield._private.node_manager.gcs_writer import GcsWriter
from rayfield._private.node_manager.jobs import finish_on_node
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.node_manager.node_service import PeerChannels, PeerError
from rayfield._private.node_manager.recovery import Recovery
from rayfield._private.protocol.errors import GcsNotFoundError
from rayfield._private.protocol.types import ActorInfo, ActorState
from rayfield.store import StoreClient

logger = logging.getLogger("rayfield")

__all__ = ["MAX_HOPS", "EndedJobs", "Lifecycle", "job_cancelled"]

MAX_HOPS = 4  # a forwarded task is not moved again; this only bounds a pathological chain
MAX_ENDED_JOBS = 1000  # jobs whose driver exited, remembered: their tasks are refused


# A node that dropped its last handle to an actor homed elsewhere tells the home this long
# after, unless it holds one again by then (see ``Lifecycle._report_soon``).
REPORT_DELAY_S = 0.2


class NativeActors(Protocol):
    """What the lifecycle asks of the native core (``rayfield.store.NodeServer``)."""

    def end_actor(self, actor_id: bytes, reason: str) -> str: ...
    def cancel_job(self, prefix: bytes, reason: str) -> int: ...


class EndedJobs:
    """The jobs whose driver exited (the newest ``max_jobs``): their tasks never run.

    No lock: callers hold theirs.
    """

    def __init__(self, max_jobs: int = MAX_ENDED_JOBS) -> None:
        self.max_jobs = max_jobs
        self._jobs: OrderedDict[bytes, None] = OrderedDict()  # oldest first

    def add(self, job_id: bytes) -> None:
        self._jobs[job_id] = None
        while len(self._jobs) > self.max_jobs:
            self._jobs.popitem(last=False)

    def of(self, task_id: bytes) -> bytes | None:
        """The ended job ``task_id`` belongs to (task ids start with their job's id)."""
        if not self._jobs:
            return None
        return next((j for j in self._jobs if task_id.startswith(j)), None)


class Lifecycle:
    """The ends of actors and tasks that involve other nodes, for one node's agent.

    Args:
        node_id: this node's id.
        gcs: the cluster's GCS client (jobs).
        writer: writes actor records to the GCS.
        client: the agent's store client (kills, cancels).
        native: the native core (ends actors, cancels jobs).
        scopes: the node's actor-handle decisions.
        peers: the cluster's nodes.
        channels: stubs of the other nodes.
        recovery: records of work sent elsewhere.
        actors: routes calls of actors hosted elsewhere.
        submit: runs a function in the background (the agent's transfer pool); raises
            RuntimeError once the node is stopping.
        job_gone: called with the id of each job whose driver of this node exited (the
            node abandons that job's results still being made elsewhere).
    """

    def __init__(
        self,
        node_id: bytes,
        gcs: GcsClient,
        writer: GcsWriter,
        client: StoreClient,
        native: NativeActors,
        scopes: ActorScopes,
        peers: PeerView,
        channels: PeerChannels,
        recovery: Recovery,
        actors: ActorRouter,
        submit: Callable[..., None],
        job_gone: Callable[[bytes], None],
    ) -> None:
        self.node_id = node_id
        self.gcs = gcs
        self.writer = writer
        self.client = client
        self.native = native
        self.scopes = scopes  # the handle decisions (pure; under _scope_lock)
        self.peers = peers
        self.channels = channels
        self.recovery = recovery
        self.actors = actors
        self._background = submit
        self._job_gone = job_gone
        self.ended_jobs = EndedJobs()
        self._jobs_lock = threading.Lock()
        self._scope_lock = threading.Lock()
        # Handle questions go to other nodes one at a time, off the event thread:
        self._scope_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rayfield-scope")
        # Actors whose release is told to their home soon, with when, oldest first (one
        # delay for all, so insertion order is due order); one thread waits for the next.
        self._reports: dict[bytes, float] = {}
        self._reports_due = threading.Condition(self._scope_lock)
        self._reporter: threading.Thread | None = None
        self._closed = False

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
            if what == "report":
                self._report_soon(actor_id)
                continue
            try:
                self._scope_pool.submit(self._confirm, actor_id)
            except RuntimeError:  # shutting down
                return

    def _report_soon(self, actor_id: bytes) -> None:
        """Tell the home of ``actor_id`` of its release here in ``REPORT_DELAY_S``, if no
        handle is held here again by then. Calls forwarded here hold their actor while they
        run, so a stream of calls in batches takes this node's count from 0 to 1 and back
        once a batch: one report a batch before, for a release that did not last."""
        with self._scope_lock:
            if self._closed or actor_id in self._reports:
                return  # stopping, or one is due already
            self._reports[actor_id] = time.monotonic() + REPORT_DELAY_S
            if self._reporter is None:
                self._reporter = threading.Thread(
                    target=self._report_loop, name="rayfield-release-reports", daemon=True
                )
                self._reporter.start()
            self._reports_due.notify()

    def _report_loop(self) -> None:
        """Wait for the oldest due report; send those due, one call per home node, for
        the actors not held here again by then."""
        while True:
            with self._scope_lock:
                while not self._closed:
                    now = time.monotonic()
                    due: list[bytes] = []
                    for actor_id, at in self._reports.items():
                        if at > now:
                            break
                        due.append(actor_id)
                    if due:
                        break
                    first = next(iter(self._reports.values()), None)
                    self._reports_due.wait(None if first is None else first - now)
                if self._closed:
                    self._reports.clear()
                    return
                for actor_id in due:
                    del self._reports[actor_id]
                # held again: its next release reports
                released = [a for a in due if a not in self.scopes.held]
            by_home: dict[str, list[bytes]] = {}
            for actor_id in released:
                home = self.peers.home_of(actor_id)
                if home is not None:
                    by_home.setdefault(home, []).append(actor_id)
            for home, actor_ids in by_home.items():
                try:
                    self._scope_pool.submit(self._report, home, actor_ids)
                except RuntimeError:  # shutting down
                    return

    def _report(self, home: str, actor_ids: list[bytes]) -> None:
        """Tell an actor's home node that this node dropped its last handle to it."""
        try:
            self.channels.stub(home).actors_released(actor_ids)
        except PeerError as exc:
            logger.debug("could not tell %s of released actor handles: %s", home, exc)

    def _confirm(self, actor_id: bytes) -> None:
        """Ask every alive node whether it holds a handle to ``actor_id``; end it if none
        does (a node that does not answer may hold one)."""
        held = False
        for peer in self.peers.alive_peers():
            try:
                held = self.channels.stub(peer.address).actors_held([actor_id])[0]
            except (PeerError, IndexError) as exc:
                logger.info("node %s did not say whether it holds a handle: %s", peer.address, exc)
                held = True
            if held:
                break
        with self._scope_lock:
            decisions = self.scopes.confirmed(actor_id, held)
        if not decisions:
            return
        outcome = self.native.end_actor(actor_id, NO_HANDLE_LEFT)
        logger.info("actor %s has no handle left: %s", short(actor_id), outcome)
        if outcome == "held":
            with self._scope_lock:
                self.scopes.end_refused(actor_id)
        elif outcome == "elsewhere":
            self._kill_orphan(actor_id, NO_HANDLE_LEFT)

    # ---- actors -----------------------------------------------------------------------

    def actor_died(self, actor_id: bytes, reason: str) -> None:
        """Record in the GCS that ``actor_id`` is dead for good (its name is free again).

        The write is queued (``GcsWriter``). An actor the GCS never recorded is skipped.
        """
        logger.info("actor %s is dead: %s", short(actor_id), reason)
        with self._scope_lock:
            self.scopes.forget(actor_id)
        self._mark_dead(actor_id)

    def _mark_dead(self, actor_id: bytes) -> None:
        self._set_state(actor_id, ActorState.DEAD)

    def _set_state(self, actor_id: bytes, state: ActorState, node_id: bytes = b"") -> None:
        """Queue setting the GCS record of ``actor_id`` to ``state`` (on ``node_id``)."""

        def update(gcs: GcsClient) -> None:
            try:
                gcs.update_actor(actor_id, state, node_id)
            except GcsNotFoundError:
                pass  # never recorded

        self.writer.write(f"record actor {short(actor_id)} {state.name}", update)

    def actor_state(self, actor_id: bytes, alive: bool) -> None:
        """An actor hosted here finished its creation (``alive``) or is being restarted:
        record it ALIVE on this node or RESTARTING in the GCS (a re-record keeps its name,
        owner and handle data; an actor the GCS did not know is recorded so)."""
        state = ActorState.ALIVE if alive else ActorState.RESTARTING
        info = ActorInfo(actor_id=actor_id, node_id=self.node_id, state=state)
        what = f"record actor {short(actor_id)} {state.name}"
        self.writer.write(what, lambda gcs: gcs.register_actor(info))

    def actors_restarted(self, actor_ids: list[bytes]) -> None:
        """Actors of a dead node are being created again from here: record them alive on
        this node (the GCS marked them dead with their node; a move elsewhere re-records
        them)."""
        for actor_id in actor_ids:
            self._set_state(actor_id, ActorState.ALIVE, self.node_id)

    def cancel_forwarded(self, task_ids: list[bytes], force: bool) -> None:
        """A recursive cancel on this node reached ``task_ids``, tasks the cancelled one
        submitted that this node no longer holds: cancel (recursively) those it forwarded,
        on the nodes it sent them to (in the background)."""
        for task_id in task_ids:
            if self.recovery.where_sent(task_id) is not None:
                self._submit(self.cancel, task_id, force)

    def owner_died(self, pid: int, actor_ids: list[bytes]) -> None:
        """The driver ``pid`` of this node disconnected; ``actor_ids`` are the non-detached
        actors it created that were moved to other nodes: kill them there (in the
        background)."""
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
        """A driver connection of this node closed: its jobs are finished, the tasks
        they left queued are cancelled on every node, and the results of its work still
        being made elsewhere are freed there once made (``job_gone``)."""
        self._submit(self._driver_gone, pid)

    def _driver_gone(self, pid: int) -> None:
        for job_id in finish_on_node(self.gcs, self.node_id, pid):
            n = self.cancel_job(job_id)
            self._job_gone(job_id)
            for peer in self.peers.alive_peers():
                try:
                    n += self.channels.stub(peer.address).cancel_job(job_id)
                except PeerError as exc:
                    logger.info(
                        "could not cancel job %s on %s: %s", job_id.hex(), peer.address, exc
                    )
            logger.info("driver pid %d exited: %d queued task(s) of it cancelled", pid, n)

    def cancel_job(self, job_id: bytes) -> int:
        """The driver of ``job_id`` is gone: cancel its tasks queued here, and those
        forwarded here from now on. Returns how many were cancelled."""
        with self._jobs_lock:
            self.ended_jobs.add(job_id)
        return self.native.cancel_job(job_id, job_cancelled(job_id))

    def job_ended_of(self, task_id: bytes) -> bytes | None:
        """The job of ``task_id`` when its driver exited (the task must not run)."""
        with self._jobs_lock:
            return self.ended_jobs.of(task_id)

    def close(self) -> None:
        with self._scope_lock:
            self._closed = True
            self._reports_due.notify()
        self._scope_pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, fn: Callable[..., object], *args: Any) -> None:
        try:
            self._background(fn, *args)
        except RuntimeError:  # the agent is shutting down (its pool is closed)
            logger.debug("not run, the node is stopping: %s", getattr(fn, "__name__", fn))

    def _kill_orphan(self, actor_id: bytes, why: str) -> None:
        self.recovery.forget_actor(actor_id, why)  # not created again if its node dies
        self.actors.route(actor_id)  # calls held here fail now
        address = self.actors.address_of(actor_id)
        try:
            if address is None:  # created here again (its node died): kill it here
                self.client.kill_actor(actor_id, True)
            elif not self.channels.stub(address).kill_actor(actor_id, True):
                logger.info("actor %s was not on %s any more", short(actor_id), address)
        except Exception as exc:
            logger.info("could not kill actor %s: %s", short(actor_id), exc)
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
        state = self.client.cancel_task(task_id, force, recursive)
        if state != "done" or hops <= 0:
            return state
        address = self.recovery.where_sent(task_id)
        if address is None:
            return state
        try:
            return self.channels.stub(address).cancel_task(
                task_id, force, hops - 1, recursive=recursive
            )
        except PeerError as exc:
            logger.info("cancel of task %s on %s failed: %s", short(task_id), address, exc)
            return state


def job_cancelled(job_id: bytes) -> str:
    """The error text of a task cancelled because its driver exited."""
    return (
        f"the task was cancelled before it ran: the driver of job {job_id.hex()} that "
        "submitted it exited"
    )
