"""rayfield.store: the native core of a rayfield node.

One shared-memory object store, one local scheduler and one event loop per
node, all in C++ threads outside the GIL. Drivers and workers talk to their
node over a Unix socket with length-prefixed flatbuffers frames
(``packages/store/schema``); the arena's file descriptor is passed once, so
every client maps the store and reads objects zero-copy.

Example:
    >>> import os, tempfile
    >>> from rayfield.store import NodeServer, StoreClient
    >>> sock = os.path.join(tempfile.mkdtemp(), "node.sock")
    >>> with NodeServer(sock, capacity_bytes=64 << 20) as node:
    ...     with StoreClient(sock) as client:
    ...         oid = os.urandom(20)
    ...         client.put(oid, b"hello", metadata=b"RAW")
    ...         [buf] = client.get([oid], timeout_s=1.0)
    ...         bytes(buf), buf.metadata
    (b'hello', b'RAW')

IDs are 20-byte ``bytes``. Sizes are in bytes, timeouts in seconds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rayfield.store import _native
from rayfield.store._native import ObjectBuffer, SchedulerState, TaskManagerState
from rayfield.store.errors import (
    GetTimeoutError,
    InvalidRequestError,
    NotAWorkerError,
    NotOwnerError,
    ObjectAlreadySealedError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectNotSealedError,
    ObjectTooLargeError,
    ProtocolMismatchError,
    StoreConnectionError,
    StoreError,
    StoreFullError,
)

__version__ = "0.1.0"

PROTOCOL_VERSION: int = _native.PROTOCOL_VERSION
ID_SIZE: int = _native.ID_SIZE
"""Bytes of every object, task, actor, job and node id (the native ``kIdSize``)."""
RESOURCE_UNIT: int = _native.RESOURCE_UNIT
"""Resource amounts are integers in units of 1/RESOURCE_UNIT (the native scheduler's fixed
point, ``kResourceUnit``)."""
NOTIFIES_EVICTIONS: bool = bool(getattr(_native, "NOTIFIES_EVICTIONS", 0))
"""Whether this build's notifications report an eviction as ``"evicted"``, apart from a
deletion (``"deleted"``); builds before it reported both as ``"deleted"``."""

if TYPE_CHECKING:
    from rayfield.store._native import NodeEvent

__all__ = [
    "ID_SIZE",
    "NOTIFIES_EVICTIONS",
    "PROTOCOL_VERSION",
    "RESOURCE_UNIT",
    "GetTimeoutError",
    "InvalidRequestError",
    "NodeServer",
    "NotAWorkerError",
    "NotOwnerError",
    "ObjectAlreadySealedError",
    "ObjectBuffer",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectNotSealedError",
    "ObjectTooLargeError",
    "ProtocolMismatchError",
    "SchedulerState",
    "StoreClient",
    "StoreConnectionError",
    "StoreError",
    "StoreFullError",
    "TaskManagerState",
]

_KINDS = {"driver": 0, "worker": 1, "tool": 2}


class StoreClient(_native.Client):
    """A connection from a driver, worker or tool to its node.

    Args:
        socket_path: the node's Unix socket.
        kind: ``"driver"``, ``"worker"`` or ``"tool"``.
        name: shown in the node's logs.
        timeout_s: how long to wait for the connection and the handshake.

    Raises:
        StoreConnectionError: the socket cannot be reached or the node hung up.
        ProtocolMismatchError: the node speaks another protocol version (both
            versions are in the message and the attributes).

    Objects: ``create`` returns a writable memoryview of ``data_size`` bytes
    (the creator's reference ends at ``seal``); ``put`` creates, writes and
    seals in one call; ``get`` waits until every object is sealed (or the
    timeout passes, leaving ``None`` in its place) and returns read-only
    :class:`ObjectBuffer` views, each holding one reference until it is
    released or garbage collected.
    """

    def __init__(
        self, socket_path: str, kind: str = "driver", name: str = "", timeout_s: float = 10.0
    ) -> None:
        if kind not in _KINDS:
            raise InvalidRequestError(f"kind must be one of {sorted(_KINDS)}, not {kind!r}")
        super().__init__(os.fspath(socket_path), _KINDS[kind], name, timeout_s)

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NodeServer:
    """The native core of one node: object store, local scheduler, event loop.

    Args:
        socket_path: Unix socket to serve clients on (created; removed at stop).
        capacity_bytes: size of the shared-memory arena in bytes.
        plasma_directory: ``None`` for an anonymous memfd; otherwise a directory
            (``/dev/shm``, a hugetlbfs mount, any filesystem) where the arena's
            backing file is created and unlinked at once.
        huge_pages: back the arena with huge pages (memfd with MFD_HUGETLB, or a
            hugetlbfs ``plasma_directory``).
        prefault: touch every page at start so large puts run at memory speed.
        warm_ahead_bytes: without ``prefault``: after each create of 1 MiB or more, a
            background thread (``SCHED_BATCH``) populates this many bytes of the arena past
            the object's end, so that the next large object (a put, a pull from another
            node) lands on pages the kernel has allocated and zeroed already instead of
            faulting them in on its creator's path; 0: none. Those pages are part of the
            arena: the store's memory never exceeds ``capacity_bytes``.
        resources: the node's resources, e.g. ``{"CPU": 2, "GPU": 1, "custom": 4}``;
            amounts are rounded to 1/10000.
        node_id: 20 bytes; random when ``None``.
        max_frame_bytes: frames longer than this are refused and the
            connection is closed.
        spill_directory: where a full store spills objects held only by pins
            (refs alive somewhere, no buffer mapped) to files, oldest first, so
            a create can proceed; a get, wait or contains of a spilled object
            restores it. Created at the first spill; its files are removed at
            stop. ``None``: no spilling.

    Raises:
        StoreError: the arena cannot be created (too little shared memory,
            huge pages not available, directory missing).
        InvalidRequestError: a bad argument (negative capacity, bad node_id).

    Events (``poll_events``) are typed tuples the host process acts on (struct
    sequences: ``event.kind == event[0]``, each item also has a name, see
    ``NodeEvent`` in ``rayfield/store/_native.pyi``):
    ``("object_missing", object_id, client_id)``,
    ``("need_worker", shape, num_waiting)``,
    ``("task_infeasible", task_id, demand, reason)``,
    ``("missing_dependencies", task_id, object_ids)``,
    ``("worker_lost", client_id, running_task_ids, actor_id_or_None)``,
    ``("client_disconnected", client_id, pid, is_driver)``,
    ``("worker_registered", client_id, pid)``,
    ``("actor_task_elsewhere", task_id, actor_id)``,
    ``("actor_died", actor_id, reason)`` (an actor hosted here is dead for good: no
    restart left, killed, or it exited),
    ``("owner_died", client_id, pid, actor_ids)`` (a driver that created
    non-detached actors disconnected: those hosted here are being killed,
    ``actor_ids`` are those it moved to other nodes),
    ``("actor_handles", actor_id, held, scoped)`` (this node's count of handles to the
    actor went 0 -> 1 or 1 -> 0; ``scoped``: created here, it ends with its last handle),
    ``("actor_state", actor_id, alive)`` (an actor hosted here finished its creation, or
    is being restarted) and
    ``("store_full", requested_bytes, capacity_bytes, used_bytes)``, the last
    one when a create failed even after eviction and spilling.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        capacity_bytes: int,
        *,
        plasma_directory: str | os.PathLike[str] | None = None,
        huge_pages: bool = False,
        prefault: bool = True,
        resources: Mapping[str, float] | None = None,
        node_id: bytes | None = None,
        max_frame_bytes: int = 64 << 20,
        spill_directory: str | os.PathLike[str] | None = None,
        warm_ahead_bytes: int = 0,
    ) -> None:
        if capacity_bytes <= 0:
            raise InvalidRequestError(f"capacity_bytes must be positive, got {capacity_bytes}")
        if warm_ahead_bytes < 0:
            raise InvalidRequestError(f"warm_ahead_bytes must be >= 0, got {warm_ahead_bytes}")
        backing = "memfd" if plasma_directory is None else "directory"
        directory = "" if plasma_directory is None else os.fspath(plasma_directory)
        if directory and not os.path.isdir(directory):
            raise InvalidRequestError(f"plasma_directory {directory!r} is not a directory")
        self._native = _native.NodeServer(
            os.fspath(socket_path),
            int(capacity_bytes),
            backing,
            directory,
            bool(huge_pages),
            bool(prefault),
            dict(resources) if resources is not None else {"CPU": float(os.cpu_count() or 1)},
            node_id,
            int(max_frame_bytes),
            "" if spill_directory is None else os.fspath(spill_directory),
            int(warm_ahead_bytes),
        )

    @property
    def socket_path(self) -> str:
        return self._native.socket_path

    @property
    def capacity_bytes(self) -> int:
        return self._native.capacity_bytes

    @property
    def node_id(self) -> bytes:
        return self._native.node_id

    @property
    def running(self) -> bool:
        return self._native.running

    @property
    def spill_directory(self) -> str | None:
        """Where objects are spilled when the store is full; ``None``: no spilling."""
        return self._native.spill_directory

    @property
    def warmed_bytes(self) -> int:
        """Bytes of the arena populated ahead of allocation so far (``warm_ahead_bytes``;
        0 when warming is off)."""
        return self._native.warmed_bytes

    def start(self) -> NodeServer:
        """Bind the socket and start the native threads. Returns self."""
        self._native.start()
        return self

    def stop(self) -> None:
        """Stop serving, close every connection and remove the socket file."""
        self._native.stop()

    def poll_events(self, timeout_s: float | None = 0.0) -> list[NodeEvent]:
        """Events since the last call; waits up to ``timeout_s`` for the first."""
        return self._native.poll_events(timeout_s)

    def stats(self) -> dict[str, int]:
        """Capacity, bytes used, object count, evictions, client count and spilling.

        ``num_spilled`` and ``spilled_bytes`` count the objects whose data is now only in
        a spill file, ``num_restored`` the restores since the start.
        """
        return self._native.stats()

    def list_objects(self) -> list[dict[str, Any]]:
        """Every object in the store, one dict each.

        Keys: ``object_id``, ``data_size`` and ``metadata_size`` (bytes), ``state``
        ("created" or "sealed"), ``ref_count`` (pins plus mapped buffers),
        ``create_time_ms``, ``owner_pid`` (the process that created it; 0 when it is
        gone), ``pin_count`` (the node's holds), ``buffer_count`` (clients' mapped
        buffers) and ``spilled`` (the data is only in a spill file).
        """
        return self._native.list_objects()

    def scheduler_snapshot(self) -> dict[str, Any]:
        """Resources (total, available), queued tasks by shape (``ready_by_shape``; the
        oldest 16 of each shape as ``ready_tasks``: ``(task_id, demand, actor_creation)``),
        infeasible tasks, workers."""
        return self._native.scheduler_snapshot()

    def take_task(self, task_id: bytes, pin_for: int = 0) -> dict[str, Any] | None:
        """Remove a queued or infeasible task (to forward it elsewhere); None if absent.

        Args:
            task_id: the task.
            pin_for: a connected client's ``client_id``: the objects the node pinned for
                the task (its arguments) stay pinned by that client (listed in the spec's
                ``kept_pins``), so they outlive their owner's references until the task
                has read them on another node. 0: they are released. The actor handles
                the task held (its arguments', a call's own actor) move to that client
                too (``kept_handles``); the spec's ``actor_handles`` lists those of its
                arguments.
        """
        return self._native.take_task(task_id, pin_for)

    def place_task(self, task_id: bytes, fail: str = "") -> bool:
        """Place a task held for its scheduling strategy (a ``task_placement`` event).

        Args:
            task_id: the task.
            fail: "" queues it on this node; a message fails it: a plain task's returns
                become ``UNSCHEDULABLE`` error objects with this text, an actor creation
                ends the actor for good (its creation and its queued and later calls
                fail with ``ACTOR_UNSCHEDULABLE`` and this text).

        Returns:
            False when no such task is held (taken or cancelled meanwhile).
        """
        return bool(self._native.place_task(task_id, fail))

    def actors_held(self, actor_ids: list[bytes]) -> list[bool]:
        """Whether this node holds a handle to each actor: a client holds one, a task not
        finished carries one (or calls the actor), or an object in the store has one."""
        return self._native.actors_held(list(actor_ids))

    def waited(self, object_ids: list[bytes]) -> list[bool]:
        """Whether anything here still waits for each object: a client's ``get`` or
        ``wait`` parked for it, or a queued task whose dependency it is."""
        return self._native.waited(list(object_ids))

    def cancel_job(self, prefix: bytes, reason: str) -> int:
        """Cancel every task queued here (not running) whose id starts with ``prefix``
        (a driver's job id, when the driver is gone): their returns become ``CANCELLED``
        error objects with ``reason``. Returns how many were cancelled."""
        return int(self._native.cancel_job(bytes(prefix), reason))

    def end_actor(self, actor_id: bytes, reason: str) -> str:
        """End an actor that no handle reaches any more, for good (no restart); its calls
        fail with ``reason``.

        Returns:
            ``"ended"`` (it lived here: its worker is killed), ``"held"`` (a handle is held
            here after all: nothing done), ``"elsewhere"`` (it moved to another node, which
            the caller asks), or ``"unknown"``.
        """
        return str(self._native.end_actor(actor_id, reason))

    def set_total_resources(self, resources: Mapping[str, float]) -> None:
        """Change the node's resource totals; infeasible tasks are re-examined."""
        self._native.set_total_resources(dict(resources))

    def running_tasks(self) -> list[dict[str, Any]]:
        """The tasks running on workers now, one dict each.

        Keys: ``pid`` (the worker process), ``task_id``, ``retriable`` (a worker death
        resubmits the task: retries are left), ``actor_task`` (an actor creation or call)
        and ``dispatch_seq`` (larger: dispatched more recently).
        """
        return self._native.running_tasks()

    def kill_worker(self, pid: int, tag: str, message: str, retry: bool = True) -> bool:
        """SIGKILL the worker process ``pid`` and say why its tasks failed.

        Its tasks with retries left are resubmitted as after any worker death (unless
        ``retry`` is False); the others fail with an error object whose metadata is
        ``tag`` (actor calls: ``ACTOR_DIED``) and whose text starts with ``message``.
        Returns False when no connected worker has that pid.
        """
        return self._native.kill_worker(int(pid), tag, message, bool(retry))

    def worker_holdings(self) -> list[dict[str, Any]]:
        """The workers that hold resources or host an actor, one dict each.

        Keys: ``pid`` (the worker process), ``actor_id`` (the actor it hosts, or None) and
        ``resources`` (``{name: amount}``: its running tasks' demand plus its actor's
        lifetime resources).
        """
        return self._native.worker_holdings()

    def __enter__(self) -> NodeServer:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
