"""The per-process runtime of a driver or a worker: objects, tasks and exported code.

There is one StoreRuntime per connected process, held by its process context
(``_private/context.py``) and reached through :func:`get_runtime`. It owns
the connection to the node (a ``rayfield.store.StoreClient``) and implements put, get,
wait and task submission over it.

Task payload (opaque to the node): a pickled tuple
``(kind, function_id, args, return_ids, name, options)`` where ``args`` is either the
serialized ``(args, kwargs)`` inline or the id of an object holding them; top-level
ObjectRef arguments are replaced by :class:`ArgRef` markers and become the task's
dependencies (the node runs the task once they are local).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import rayfield.exceptions as exceptions
from rayfield._private import context
from rayfield._private.common import code, serialization
from rayfield._private.common.actor_scope import HandleCounter
from rayfield._private.common.ids import ID_SIZE, IdGenerator
from rayfield._private.driver import code_exports, locate
from rayfield._private.runtime.object_ref import ObjectRef, RefTracker, set_tracker
from rayfield.store import GetTimeoutError as StoreGetTimeout
from rayfield.store import ObjectExistsError, StoreClient

__all__ = ["ArgRef", "SerializedArgs", "StoreRuntime", "get_runtime"]

INLINE_ARGS_BYTES = 100 << 10  # larger arguments travel through the store
STAGED_RESULT_BYTES = 64 << 10  # a worker's results up to this size travel with task_done
STAGED_TOTAL_BYTES = 1 << 20  # and up to this much in all per task
GET_SLICE_S = 0.5  # a worker's blocking get or wait wakes this often to let a cancel in
ERROR_TAGS = (
    b"ERROR",
    b"WORKER_DIED",
    b"ACTOR_DIED",
    b"ACTOR_UNSCHEDULABLE",
    b"CANCELLED",
    b"LOST",
    b"OUT_OF_MEMORY",
    b"UNSCHEDULABLE",
)


class SerializedArgs(NamedTuple):
    """A task's serialized ``(args, kwargs)`` and what they refer to."""

    ser: serialization.SerializedObject
    deps: list[bytes]  # top-level ObjectRef arguments: resolved before the task runs
    pins: list[bytes]  # every ObjectRef in them: held until the task is done
    handles: list[bytes]  # the actors of the handles in them


class ArgRef:
    """Marks a top-level ObjectRef argument, resolved to its value before the task runs."""

    __slots__ = ("object_id",)

    def __init__(self, object_id: bytes) -> None:
        self.object_id = object_id

    def __reduce__(self) -> Any:
        return (ArgRef, (self.object_id,))


class StoreRuntime:
    """A driver's or worker's connection to its node and everything built on it."""

    def __init__(self, socket_path: str, *, is_worker: bool, node_address: str = "127.0.0.1"):
        self.client = StoreClient(socket_path, kind="worker" if is_worker else "driver")
        self.socket_path = socket_path
        self.is_worker = is_worker
        self.node_address = node_address
        self.refs = RefTracker(self.client)
        self.handles = HandleCounter(self.client)  # actor handles alive in this process
        self.ids = IdGenerator(self.client.node_id)
        self.exported: set[bytes] = set()
        # The job's runtime_env (packages as URIs), its canonical string, and the canonical
        # strings of the runtime_envs given as options (``driver/runtime_env_packages.py``).
        self.runtime_env: dict[str, Any] = {}
        self.runtime_env_string = ""
        self.runtime_env_cache: dict[str, str] = {}
        self.functions: dict[bytes, Any] = {}
        self.local = threading.local()  # current task (worker side)
        self.events: Any = None  # EventLog, set by the driver or the worker
        self.serializer_ids: tuple[bytes, ...] = ()  # custom serializers for workers
        self.worker_id = os.urandom(ID_SIZE)  # a worker registers with it (get_worker_id())
        # Returns of direct actor calls not stored here yet (``driver/direct_calls.py``):
        # a get waits for them here, so the node never looks for them elsewhere.
        self.direct_in_flight: set[bytes] = set()
        self.direct_arrived = threading.Condition()
        set_tracker(self.refs)

    def close(self) -> None:
        """Stop counting refs and close the connection to the node."""
        set_tracker(None)
        self.client.close()

    # ---- objects --------------------------------------------------------------------

    def store_value(self, object_id: bytes, value: Any, *, exist_ok: bool = True) -> None:
        """Serialize `value` into the store under `object_id` (create, write, seal).

        With ``exist_ok`` an object already stored under the id is left as it is (a retried
        task or a restarted actor producing the same result again).
        """
        obj = serialization.serialize(value)
        self._hold_handles(object_id, obj)
        self.store_serialized(object_id, obj, exist_ok=exist_ok)

    def _hold_handles(self, object_id: bytes, obj: serialization.SerializedObject) -> None:
        """Actor handles inside an object keep their actors alive while it is stored."""
        actors = [h._actor_id for h in obj.contained_refs if not isinstance(h, ObjectRef)]
        if actors:
            self.handles.in_object(object_id, actors)

    def stage_result(
        self, object_id: bytes, value: Any, staged: list[tuple[bytes, bytes, bytes]]
    ) -> None:
        """Serialize a task's result; a small one joins ``staged``, a larger one is stored now.

        ``staged`` holds ``(object_id, data, metadata)`` for ``StoreClient.task_done``, which
        stores them in the same message as the task's end (one send instead of two). As with
        :meth:`store_value` in a worker, an object already stored under the id stays.
        """
        obj = serialization.serialize(value)
        self._hold_handles(object_id, obj)
        size = obj.total_bytes
        if size <= STAGED_RESULT_BYTES and size + sum(len(d) for _, d, _ in staged) <= (
            STAGED_TOTAL_BYTES
        ):
            staged.append((object_id, obj.to_bytes(), obj.metadata))
        else:
            self.store_serialized(object_id, obj)

    def store_serialized(
        self, object_id: bytes, obj: serialization.SerializedObject, *, exist_ok: bool = True
    ) -> None:
        """Store the serialized ``obj`` under ``object_id`` (its handles held by the node while it
        lives)."""
        try:
            if obj.total_bytes <= INLINE_ARGS_BYTES:
                # A worker's results need no reply: its task_done follows on the same socket.
                wait = not (self.is_worker and exist_ok)
                self.client.put(object_id, obj.to_bytes(), obj.metadata, wait)
            else:
                view = self.client.create(object_id, obj.total_bytes, obj.metadata)
                obj.write_to(view)
                self.client.seal(object_id)
        except ObjectExistsError:
            if not exist_ok:
                raise

    def put(self, value: Any) -> ObjectRef[Any]:
        """``rayfield.put``: store ``value`` under a new id owned by this process."""
        if isinstance(value, ObjectRef):
            raise TypeError("put() of an ObjectRef: pass the ref itself instead")
        self.refs.flush()  # dropped refs first: their space may be needed now
        oid = self.ids.put_id()
        self.client.pin([oid])  # the owner's pin, before the object exists
        ref: ObjectRef[Any] = ObjectRef(oid, _pinned=True)
        self.refs.own(oid)
        self.store_value(oid, value)
        return ref

    def get(self, refs: Sequence[ObjectRef[Any]], timeout_s: float | None) -> list[Any]:
        """The values of ``refs``, in order; raises the error a task stored. ``timeout_s``: seconds,
        None for no limit."""
        ids = [r.binary() for r in refs]
        self.refs.flush()
        if self.direct_in_flight and not self.direct_in_flight.isdisjoint(ids):
            timeout_s = self._await_direct(ids, timeout_s)
        bufs = self.client.get(ids, timeout_s=0 if self.is_worker else timeout_s)
        if self.is_worker and None in bufs and timeout_s != 0:
            missing = [i for i, b in enumerate(bufs) if b is None]
            self.client.set_blocked(True)  # lend this worker's CPU while waiting
            try:
                more = self._blocking_get([ids[i] for i in missing], timeout_s)
            finally:
                self.client.set_blocked(False)
            for i, b in zip(missing, more):
                bufs[i] = b
        values = []
        for ref, buf in zip(refs, bufs):
            if buf is None:
                raise exceptions.GetTimeoutError(
                    f"get timed out after {timeout_s} s waiting for {ref}"
                )
            values.append(self._decode(ref, buf))
        return values

    def _await_direct(self, ids: list[bytes], timeout_s: float | None) -> float | None:
        """Wait until no id of ``ids`` is a direct call's return on its way; the time
        left of ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self.direct_arrived:
            while not self.direct_in_flight.isdisjoint(ids):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self.direct_arrived.wait(left)
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _blocking_get(self, ids: list[bytes], timeout_s: float | None) -> list[Any]:
        """A worker's get that waits, in slices of ``GET_SLICE_S``: between two, Python
        runs signal handlers, so a cancel's KeyboardInterrupt reaches a task blocked here
        (``interrupts.py``)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        bufs: list[Any] = [None] * len(ids)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = GET_SLICE_S if left is None else min(left, GET_SLICE_S)
            missing = [i for i, b in enumerate(bufs) if b is None]
            for i, b in zip(missing, self.client.get([ids[i] for i in missing], timeout_s=step)):
                bufs[i] = b
            if None not in bufs or (left is not None and left <= step):
                return bufs

    def _decode(self, ref: ObjectRef[Any], buf: Any) -> Any:
        meta = buf.metadata
        if meta in ERROR_TAGS:
            if meta == b"ERROR":
                raise serialization.deserialize(memoryview(buf), meta)
            message = bytes(buf).decode(errors="replace")
            buf.release()
            if meta == b"ACTOR_DIED":
                raise exceptions.ActorDiedError(f"{message} (object {ref.hex()})")
            if meta == b"ACTOR_UNSCHEDULABLE":
                raise exceptions.ActorUnschedulableError(f"{message} (object {ref.hex()})")
            if meta == b"UNSCHEDULABLE":
                raise exceptions.TaskUnschedulableError(f"{message} (object {ref.hex()})")
            if meta == b"CANCELLED":
                raise exceptions.TaskCancelledError(f"{message} (object {ref.hex()})")
            if meta == b"LOST":
                raise exceptions.ObjectLostError(message)
            if meta == b"OUT_OF_MEMORY":
                raise exceptions.OutOfMemoryError(f"{message} (object {ref.hex()})")
            raise exceptions.WorkerCrashedError(f"{message} (object {ref.hex()})")
        if meta == b"RAW" and buf.size < 4096:
            data = bytes(buf)
            buf.release()
            return data
        return serialization.deserialize(memoryview(buf), meta)

    def wait(
        self,
        refs: Sequence[ObjectRef[Any]],
        num_returns: int,
        timeout_s: float | None,
        fetch_local: bool = True,
    ) -> tuple[list[ObjectRef[Any]], list[ObjectRef[Any]]]:
        """``rayfield.wait``: (ready, not ready) refs once ``num_returns`` are ready or
        ``timeout_s`` passed; without ``fetch_local`` (in a cluster), ready means held by
        some node's store, and nothing is fetched here."""
        self.refs.flush()
        ids = [r.binary() for r in refs]
        if not fetch_local and context.gcs_address() is not None:
            flags = locate.wait_anywhere(self._here, ids, num_returns, timeout_s)
            return _split(refs, flags, num_returns)
        # A worker waits in slices, as in _blocking_get, so that a cancel reaches its task.
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = left
            if self.is_worker and (left is None or left > GET_SLICE_S):
                step = GET_SLICE_S
            try:
                flags = self.client.wait(ids, num_returns, step)
            except StoreGetTimeout:
                flags = [False] * len(refs)
            if sum(flags) >= num_returns or step is None or step == left:
                break
        return _split(refs, flags, num_returns)

    def _here(self, ids: list[bytes]) -> list[bool]:
        """Which of ``ids`` this node's store holds now (a wait that does not park, so the
        node fetches nothing)."""
        try:
            return list(self.client.wait(ids, len(ids), 0))
        except StoreGetTimeout:
            return [False] * len(ids)

    # ---- code ----------------------------------------------------------------------

    def export(self, obj: Any) -> bytes:
        """Put a function or class into the store once, and in a cluster into the GCS
        (``common/code.py``, ``driver/code_exports.py``); its id is its content hash."""
        return self.export_blob(code.pack(obj))

    def export_blob(self, blob: bytes) -> bytes:
        """Put ``blob`` into the store once under its code id (its content hash), pinned for
        the session, and in a cluster into the GCS; returns the id. Exported code and the
        packages of runtime_envs (``driver/runtime_env_packages.py``) are stored so."""
        fid = code.code_id(blob)
        if fid not in self.exported:
            self.client.pin([fid])  # kept for the whole session
            try:
                self.client.put(fid, blob, code.CODE_META)
            except ObjectExistsError:
                pass  # exported before (same content, same id)
            code_exports.publish(fid, blob)
            self.exported.add(fid)
        return fid

    def load(self, function_id: bytes) -> Any:
        """The function or class exported under ``function_id`` (unpickled once per process)."""
        fn = self.functions.get(function_id)
        if fn is None:
            [buf] = self.client.get([function_id], timeout_s=60)
            if buf is None:
                raise RuntimeError(f"function {function_id.hex()} was not exported")
            fn = code.unpack(bytes(buf))
            buf.release()
            self.functions[function_id] = fn
        return fn

    # ---- tasks ---------------------------------------------------------------------

    def submit(
        self,
        kind: str,
        function_id: bytes,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        num_returns: int,
        name: str,
        resources: dict[str, float],
        *,
        max_retries: int = 0,
        options: dict[str, Any] | None = None,
        actor_id: bytes | None = None,
        caller_id: bytes | None = None,
        sequence_no: int = 0,
        max_concurrency: int = 1,
        detached: bool = False,
        scheduling: str = "",
        runtime_env: str = "",
    ) -> list[ObjectRef[Any]]:
        """Submit a task, an actor creation or an actor call to the node; returns the refs of its
        results. ``scheduling``: a plain task's or an actor creation's strategy, encoded by
        ``common.scheduling.encode`` ("": the node queues it as usual); ``runtime_env``: the
        canonical runtime_env it runs in (``driver/runtime_env_packages.for_submit``; "":
        the default)."""
        args_obj = self.serialize_args(args, kwargs)
        return_ids = self.submit_serialized(
            kind,
            function_id,
            args_obj,
            num_returns,
            name,
            resources,
            max_retries=max_retries,
            options=options,
            actor_id=actor_id,
            caller_id=caller_id,
            sequence_no=sequence_no,
            max_concurrency=max_concurrency,
            detached=detached,
            scheduling=scheduling,
            runtime_env=runtime_env,
        )
        for r in return_ids:
            self.refs.own(r)
        return [ObjectRef(r, _pinned=True) for r in return_ids]

    def serialize_args(self, args: Sequence[Any], kwargs: dict[str, Any]) -> SerializedArgs:
        """A task's ``(args, kwargs)`` serialized, top-level ObjectRefs marked as
        dependencies."""
        deps: list[bytes] = []
        marked = [ArgRef(a.binary()) if isinstance(a, ObjectRef) else a for a in args]
        for a in marked:
            if isinstance(a, ArgRef):
                deps.append(a.object_id)
        kw = {k: ArgRef(v.binary()) if isinstance(v, ObjectRef) else v for k, v in kwargs.items()}
        deps += [v.object_id for v in kw.values() if isinstance(v, ArgRef)]
        ser = serialization.serialize((marked, kw))
        pins = deps + [r.binary() for r in ser.contained_refs if isinstance(r, ObjectRef)]
        # Handles in the arguments: the node holds their actors until the task finishes.
        handles = [h._actor_id for h in ser.contained_refs if not isinstance(h, ObjectRef)]
        return SerializedArgs(ser, deps, pins, handles)

    def submit_serialized(
        self,
        kind: str,
        function_id: bytes,
        args_obj: SerializedArgs,
        num_returns: int,
        name: str,
        resources: dict[str, float],
        *,
        max_retries: int = 0,
        options: dict[str, Any] | None = None,
        actor_id: bytes | None = None,
        caller_id: bytes | None = None,
        sequence_no: int = 0,
        max_concurrency: int = 1,
        detached: bool = False,
        scheduling: str = "",
        runtime_env: str = "",
        task_id: bytes | None = None,
        pin_returns: bool = True,
    ) -> list[bytes]:
        """:meth:`submit` with the arguments serialized already; returns the return ids
        (not owned yet). ``task_id``: the task's id (default: a new one);
        ``pin_returns``: the node pins the returns for this process (False: it holds its
        own pins already)."""
        ser, deps, pins, handles = args_obj
        args_part: Any
        if ser.total_bytes > INLINE_ARGS_BYTES:
            args_id = self.ids.put_id()
            self.store_serialized(args_id, ser)
            args_part, deps, pins = args_id, [*deps, args_id], [*pins, args_id]
        else:
            args_part = (ser.to_bytes(), ser.metadata)
        task_id = task_id or self.ids.task_id()
        return_ids = [IdGenerator.return_id(task_id, i) for i in range(num_returns)]
        # The job: a driver's own id prefix; a worker passes on that of its current task.
        job = getattr(self.local, "job_id", None) or self.ids.job_id
        options = dict(options or (), submitted=time.time(), job=job)
        if self.serializer_ids:
            options["serializers"] = self.serializer_ids
        payload = pickle.dumps(
            (kind, function_id, args_part, return_ids, name, options), protocol=5
        )
        self.client.submit_task(
            task_id,
            payload,
            resources=resources,
            dependencies=deps,
            actor_id=actor_id,
            actor_creation=kind == "actor_create",
            max_concurrency=max_concurrency,
            caller_id=caller_id,
            sequence_no=sequence_no,
            return_ids=return_ids,
            max_retries=max_retries,
            pins=pins,
            pin_returns=pin_returns,  # the node pins them for us, before anything can evict them
            detached=detached,  # an actor creation: it does not end with this driver
            actor_handles=handles or None,
            scheduling=scheduling,
            runtime_env=runtime_env,
        )
        return return_ids

    def resolve_args(self, args_part: Any) -> tuple[list[Any], dict[str, Any]]:
        """Rebuild a task's (args, kwargs), fetching ObjectRef arguments by value."""
        if isinstance(args_part, bytes):
            [buf] = self.get([ObjectRef(args_part)], None)
            args, kwargs = buf
        else:
            data, meta = args_part
            args, kwargs = serialization.deserialize(data, meta)
        refs = [a for a in args if isinstance(a, ArgRef)]
        refs += [v for v in kwargs.values() if isinstance(v, ArgRef)]
        if refs:
            values = dict(
                zip(
                    (r.object_id for r in refs),
                    self.get([ObjectRef(r.object_id) for r in refs], None),
                )
            )
            args = [values[a.object_id] if isinstance(a, ArgRef) else a for a in args]
            kwargs = {
                k: values[v.object_id] if isinstance(v, ArgRef) else v for k, v in kwargs.items()
            }
        return list(args), kwargs


get_runtime: Callable[[], StoreRuntime] = context.runtime
"""The runtime of this process (``LocalRuntime`` in local mode: both implement
``interface.Runtime``, the members the public API uses); raises ``RayfieldError`` when
rayfield is not initialized. It is ``context.runtime`` itself: one call on every submit
and get."""


def _split(
    refs: Sequence[ObjectRef[Any]], flags: Sequence[bool], num_returns: int
) -> tuple[list[ObjectRef[Any]], list[ObjectRef[Any]]]:
    """``(ready, not_ready)`` in input order; at most ``num_returns`` ready."""
    ready = [r for r, f in zip(refs, flags) if f][:num_returns]
    chosen = set(map(id, ready))
    return ready, [r for r in refs if id(r) not in chosen]


if TYPE_CHECKING:
    from rayfield._private.runtime.interface import Runtime

    _implements: type[Runtime] = StoreRuntime  # checked by mypy
