# Hand-written stub of the native extension rayfield.store._native.
# IDs are 20-byte `bytes`. Sizes are bytes, timeouts seconds (None: forever).
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias, type_check_only

from typing_extensions import Buffer

PROTOCOL_VERSION: int
ID_SIZE: int
NOTIFIES_EVICTIONS: int
RESOURCE_UNIT: int

def set_log_callback(callback: Any | None) -> None: ...

class ObjectBuffer:
    """A read-only, zero-copy view of a sealed object; holds one reference.

    Supports the buffer protocol (the data region, read-only). The reference
    is released by release() or when the last view of it is gone.
    """

    @property
    def object_id(self) -> bytes: ...
    @property
    def metadata(self) -> bytes: ...
    @property
    def size(self) -> int: ...
    def release(self) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class Client:
    def __init__(
        self, socket_path: str, kind: int = 0, name: str = "", timeout_s: float = 10.0
    ) -> None: ...
    @property
    def client_id(self) -> int: ...
    @property
    def node_id(self) -> bytes: ...
    @property
    def arena_size(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    # objects
    def create(self, object_id: bytes, data_size: int, metadata: bytes = b"") -> memoryview: ...
    def seal(self, object_id: bytes) -> None: ...
    def abort(self, object_id: bytes) -> None: ...
    def put(
        self, object_id: bytes, data: Buffer, metadata: bytes = b"", wait: bool = True
    ) -> None: ...
    def get(
        self, object_ids: Sequence[bytes], timeout_s: float | None = None
    ) -> list[ObjectBuffer | None]: ...
    def release(self, object_id: bytes) -> None: ...
    def release_many(self, object_ids: Sequence[bytes], free: bool = False) -> None: ...
    def pin(self, object_ids: Sequence[bytes]) -> None: ...
    def unpin(self, object_ids: Sequence[bytes], free: bool = False) -> None: ...
    def wait(
        self, object_ids: Sequence[bytes], num_ready: int, timeout_s: float | None = None
    ) -> list[bool]: ...
    def contains(self, object_id: bytes) -> bool: ...
    def delete(self, object_ids: Sequence[bytes]) -> list[bool]: ...
    def list_objects(self) -> list[dict[str, Any]]: ...
    def stats(self) -> dict[str, int]: ...
    def subscribe(self) -> None: ...
    def next_notification(
        self, timeout_s: float | None = None
    ) -> tuple[str, bytes, int, int] | None: ...
    # scheduling
    def submit_task(
        self,
        task_id: bytes,
        payload: bytes,
        resources: dict[str, float] | None = None,
        dependencies: Sequence[bytes] = (),
        actor_id: bytes | None = None,
        actor_creation: bool = False,
        max_concurrency: int = 1,
        caller_id: bytes | None = None,
        sequence_no: int = 0,
        return_ids: Sequence[bytes] = (),
        max_retries: int = 0,
        pins: Sequence[bytes] = (),
        pin_returns: bool = False,
        resume_sequence: bool = False,
        detached: bool = False,
        actor_handles: Sequence[bytes] | None = None,
        scheduling: str = "",
        runtime_env: str = "",
    ) -> None: ...
    def actor_handles(
        self,
        actor_ids: Sequence[bytes],
        add: bool,
        object_id: bytes | None = None,
        scoped: bool = False,
    ) -> None: ...
    def register_worker(self, worker_id: bytes, runtime_env: str = "") -> None: ...
    def next_task(self, timeout_s: float | None = None) -> dict[str, Any] | None: ...
    def task_done(
        self,
        task_id: bytes,
        exiting: bool = False,
        results: Sequence[tuple[bytes, Buffer, bytes]] | None = None,
        retry: bool = False,
    ) -> None: ...
    def set_blocked(self, blocked: bool) -> None: ...
    def kill_actor(self, actor_id: bytes, no_restart: bool = True) -> None: ...
    def node_state(self) -> dict[str, dict[str, float]]: ...
    def cancel_task(
        self, task_id: bytes, force: bool = False, recursive: bool = True, query: bool = False
    ) -> str: ...

# ---- typed node events and decisions ------------------------------------------------------
# Struct sequences: tuples whose first item is the kind, with a named field for each item,
# so `event.pid` and `event[2]` are the same value.

class ObjectMissingEvent(tuple[Any, ...]):
    """A client waits for an object this node has never seen."""

    kind: Literal["object_missing"]
    object_id: bytes
    client: int

class ClientDisconnectedEvent(tuple[Any, ...]):
    """A connection closed; ``driver``: it was a driver's."""

    kind: Literal["client_disconnected"]
    client: int
    pid: int
    driver: bool

class WorkerRegisteredEvent(tuple[Any, ...]):
    kind: Literal["worker_registered"]
    client: int
    pid: int

class StoreFullEvent(tuple[Any, ...]):
    """A create failed even after eviction and spilling (sizes in bytes)."""

    kind: Literal["store_full"]
    requested_bytes: int
    capacity_bytes: int
    used_bytes: int

class ActorTaskElsewhereEvent(tuple[Any, ...]):
    """An actor call for an actor on another node: take it (take_task) and forward it."""

    kind: Literal["actor_task_elsewhere"]
    task_id: bytes
    actor_id: bytes

class ActorDiedEvent(tuple[Any, ...]):
    """An actor hosted here is dead for good (no restart left, killed, or it exited)."""

    kind: Literal["actor_died"]
    actor_id: bytes
    reason: str

class OwnerDiedEvent(tuple[Any, ...]):
    """A driver that created non-detached actors disconnected; ``elsewhere``: those it
    moved to other nodes (the host kills them)."""

    kind: Literal["owner_died"]
    client: int
    pid: int
    elsewhere: list[bytes]

class CancelElsewhereEvent(tuple[Any, ...]):
    """A recursive cancel reached tasks this node no longer holds."""

    kind: Literal["cancel_elsewhere"]
    task_ids: list[bytes]
    force: bool

class ActorHandlesEvent(tuple[Any, ...]):
    """This node's count of handles to an actor went 0 -> 1 (``held``) or 1 -> 0."""

    kind: Literal["actor_handles"]
    actor_id: bytes
    held: bool
    scoped: bool

class ActorStateEvent(tuple[Any, ...]):
    """An actor hosted here finished its creation (``alive``) or is being restarted."""

    kind: Literal["actor_state"]
    actor_id: bytes
    alive: bool

class NeedWorkerEvent(tuple[Any, ...]):
    """Ready tasks of ``shape`` lack an idle worker; a fourth item, the runtime_env
    (canonical JSON) of those tasks, when it is not the default one."""

    kind: Literal["need_worker"]
    shape: dict[str, float]
    num_waiting: int

class TaskInfeasibleEvent(tuple[Any, ...]):
    kind: Literal["task_infeasible"]
    task_id: bytes
    demand: dict[str, float]
    reason: str

class MissingDependenciesEvent(tuple[Any, ...]):
    """A task's arguments are not local: the host fetches them."""

    kind: Literal["missing_dependencies"]
    task_id: bytes
    object_ids: list[bytes]

class TaskPlacementEvent(tuple[Any, ...]):
    """A plain task or actor creation with a scheduling strategy (``scheduling``: "SPREAD"
    or "NODE:<hex>:<1 soft | 0 hard>") is held until the host places it (place_task) or
    takes it (take_task)."""

    kind: Literal["task_placement"]
    task_id: bytes
    scheduling: str
    demand: dict[str, float]
    actor_creation: bool

class WorkerLostEvent(tuple[Any, ...]):
    kind: Literal["worker_lost"]
    worker: int
    running_tasks: list[bytes]
    actor_id: bytes | None

NodeEvent: TypeAlias = (
    ObjectMissingEvent
    | ClientDisconnectedEvent
    | WorkerRegisteredEvent
    | StoreFullEvent
    | ActorTaskElsewhereEvent
    | ActorDiedEvent
    | OwnerDiedEvent
    | CancelElsewhereEvent
    | ActorHandlesEvent
    | ActorStateEvent
    | NeedWorkerEvent
    | TaskInfeasibleEvent
    | MissingDependenciesEvent
    | WorkerLostEvent
    | TaskPlacementEvent
)

class DispatchDecision(tuple[Any, ...]):
    """The scheduler sends a task to a worker; ``instances``: (name, index, amount)."""

    kind: Literal["dispatch"]
    worker: int
    task_id: bytes
    instances: list[tuple[str, int, float]]

SchedulerDecision: TypeAlias = (
    DispatchDecision
    | NeedWorkerEvent
    | TaskInfeasibleEvent
    | MissingDependenciesEvent
    | WorkerLostEvent
)

class DispatchTaskDecision(tuple[Any, ...]):
    kind: Literal["dispatch_task"]
    worker: int
    task_id: bytes
    retries_left: int
    attempt: int

class StoreErrorDecision(tuple[Any, ...]):
    """Store an error object: ``message`` as data, ``tag`` as metadata."""

    kind: Literal["store_error"]
    object_id: bytes
    tag: str
    message: str

class ReleasePinsDecision(tuple[Any, ...]):
    kind: Literal["release_pins"]
    object_ids: list[bytes]

class KillWorkerDecision(tuple[Any, ...]):
    kind: Literal["kill_worker"]
    worker: int

class InterruptWorkerDecision(tuple[Any, ...]):
    kind: Literal["interrupt_worker"]
    worker: int

TaskDecision: TypeAlias = (
    DispatchTaskDecision
    | StoreErrorDecision
    | ReleasePinsDecision
    | KillWorkerDecision
    | InterruptWorkerDecision
    | NodeEvent
)

# ---- what several classes answer alike (stub-only bases: no such class at run time) ------

@type_check_only
class _TaskManagerQueries:
    """Asked of the node's task manager: a NodeServer passes them to the one it runs,
    a TaskManagerState is that manager alone."""

    def actors_held(self, actor_ids: Sequence[bytes]) -> list[bool]: ...
    def cancel_job(self, prefix: bytes, reason: str) -> int: ...
    def end_actor(self, actor_id: bytes, reason: str) -> str: ...
    def place_task(self, task_id: bytes, fail: str = "") -> bool:
        """Queue here a task held for placement (``task_placement`` event), or with
        ``fail`` fail it with that message; False when no such task is held."""
    def running_tasks(self) -> list[dict[str, Any]]: ...

@type_check_only
class _SchedulingEvents:
    """Events that a SchedulerState and a TaskManagerState (around its own scheduler)
    take alike, and their snapshot."""

    def object_available(self, object_id: bytes) -> None: ...
    def set_worker_blocked(self, worker: int, blocked: bool) -> None: ...
    def set_total(self, total: dict[str, float]) -> None: ...
    def snapshot(self) -> dict[str, Any]: ...

class NodeServer(_TaskManagerQueries):
    def __init__(
        self,
        socket_path: str,
        capacity_bytes: int,
        backing: str = "memfd",
        directory: str = "",
        huge_pages: bool = False,
        prefault: bool = True,
        resources: dict[str, float] | None = None,
        node_id: bytes | None = None,
        max_frame_bytes: int = 64 << 20,
        spill_directory: str = "",
        warm_ahead_bytes: int = 0,
    ) -> None: ...
    @property
    def socket_path(self) -> str: ...
    @property
    def capacity_bytes(self) -> int: ...
    @property
    def node_id(self) -> bytes: ...
    @property
    def running(self) -> bool: ...
    @property
    def spill_directory(self) -> str | None: ...
    @property
    def warmed_bytes(self) -> int: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def poll_events(self, timeout_s: float | None = 0.0) -> list[NodeEvent]: ...
    def stats(self) -> dict[str, int]: ...
    def list_objects(self) -> list[dict[str, Any]]: ...
    def scheduler_snapshot(self) -> dict[str, Any]: ...
    def take_task(self, task_id: bytes, pin_for: int = 0) -> dict[str, Any] | None: ...
    def set_total_resources(self, resources: dict[str, float]) -> None: ...
    def kill_worker(self, pid: int, tag: str, message: str, retry: bool = ...) -> bool: ...
    def worker_holdings(self) -> list[dict[str, Any]]: ...
    def waited(self, object_ids: Sequence[bytes]) -> list[bool]: ...

class SchedulerState(_SchedulingEvents):
    def __init__(self, total: dict[str, float]) -> None: ...
    def submit(
        self,
        task_id: bytes,
        resources: dict[str, float] | None = None,
        dependencies: Sequence[bytes] = (),
        missing: Sequence[bytes] = (),
        actor_id: bytes | None = None,
        actor_creation: bool = False,
        max_concurrency: int = 1,
        caller_id: bytes | None = None,
        sequence_no: int = 0,
        payload: bytes = b"",
        resume_sequence: bool = False,
        runtime_env: str = "",
    ) -> None: ...
    def add_worker(self, worker: int, runtime_env: str = "") -> None: ...
    def remove_worker(self, worker: int) -> None: ...
    def task_finished(self, worker: int, task_id: bytes) -> None: ...
    def take_task(self, task_id: bytes) -> dict[str, Any] | None: ...
    def decisions(self) -> list[SchedulerDecision]: ...
    def total(self) -> dict[str, float]: ...
    def available(self) -> dict[str, float]: ...

class TaskManagerState(_TaskManagerQueries, _SchedulingEvents):
    """The node's task and actor manager as a state machine (no sockets, no threads).

    Objects count as local (for retried tasks and restarted actors) from
    object_available() until object_deleted().
    """

    def __init__(self, total: dict[str, float], node_name: str = "node") -> None: ...
    def submit(
        self,
        task_id: bytes,
        resources: dict[str, float] | None = None,
        dependencies: Sequence[bytes] = (),
        missing: Sequence[bytes] = (),
        actor_id: bytes | None = None,
        actor_creation: bool = False,
        max_concurrency: int = 1,
        caller_id: bytes | None = None,
        sequence_no: int = 0,
        payload: bytes = b"",
        resume_sequence: bool = False,
        runtime_env: str = "",
        *,
        return_ids: Sequence[bytes] = (),
        pins: Sequence[bytes] = (),
        max_retries: int = 0,
        actor_handles: Sequence[bytes] = (),
        parent_worker: int = 0,
        owner: int = 0,
        detached: bool = False,
        scheduling: str = "",
    ) -> None: ...
    def worker_registered(self, worker: int, pid: int = 0, runtime_env: str = "") -> None: ...
    def task_done(
        self, worker: int, task_id: bytes, retry: bool = False, exiting: bool = False
    ) -> None: ...
    def client_gone(
        self, client: int, worker: bool = False, driver: bool = False, pid: int = 0
    ) -> None: ...
    def object_deleted(self, object_id: bytes) -> None: ...
    def actor_handles(
        self,
        client: int,
        actor_ids: Sequence[bytes],
        add: bool,
        scoped: bool = False,
        object_id: bytes | None = None,
    ) -> None: ...
    def set_kill_reason(self, worker: int, tag: str, message: str) -> None: ...
    def cancel_task(
        self, task_id: bytes, force: bool = False, recursive: bool = False, query: bool = False
    ) -> str: ...
    def kill_actor(self, actor_id: bytes, no_restart: bool = True) -> None: ...
    def take_task(self, task_id: bytes, keeper: int = 0) -> dict[str, Any] | None: ...
    def decisions(self, scheduler: bool = True) -> list[TaskDecision]: ...

class AllocatorState:
    """The arena's best-fit allocator over offsets only (64-byte aligned blocks)."""

    def __init__(self, capacity: int) -> None: ...
    def allocate(self, size: int) -> int | None: ...
    def free(self, offset: int) -> None: ...
    def info(self) -> dict[str, int]: ...
    def block_size(self, offset: int) -> int: ...

class ObjectTableState:
    """The object table: references per client and LRU eviction, without memory."""

    def __init__(self, capacity: int) -> None: ...
    def create(
        self, client: int, object_id: bytes, data_size: int, metadata_size: int = 0
    ) -> int: ...
    def seal(self, client: int, object_id: bytes) -> None: ...
    def abort(self, client: int, object_id: bytes) -> None: ...
    def release(self, client: int, object_id: bytes) -> None: ...
    def pin(self, client: int, object_id: bytes) -> None: ...
    def unpin(self, client: int, object_id: bytes) -> None: ...
    def spill_candidate(self) -> bytes | None: ...
    def mark_spilled(self, object_id: bytes, key: int) -> None: ...
    def restore(self, object_id: bytes) -> int | None: ...
    def acquire(self, client: int, object_id: bytes) -> int | None: ...
    def delete(self, object_id: bytes) -> bool: ...
    def client_gone(self, client: int) -> None: ...
    def list_objects(self) -> list[dict[str, Any]]: ...
    def stats(self) -> dict[str, int]: ...
    def events(self) -> list[tuple[str, bytes]]: ...
