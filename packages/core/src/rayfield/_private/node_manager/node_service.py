"""The node manager's gRPC: the ``/rayfield.Node/<Method>`` service, its server, and
the stubs of other nodes. The only module of the node manager that imports grpc; the
others see :class:`NodeStub` methods, :class:`PeerChannels` and :class:`PeerError`.

Payloads are flatbuffers (``schema/cluster.fbs``, see ``protocol/messages.py``) through grpcio's
generic handlers. The cluster token is checked by ``TokenInterceptor`` before any payload
is decoded; a payload that does not decode is answered with ``INVALID_ARGUMENT``.

Methods:
    PullObject (response stream): the object's chunks, waiting for it to be sealed here
        up to the request's timeout.
    ForwardTasks: queue tasks that another node could not place or moved here
        (``forwarding.py``), one reply each, in order; ``in_order`` batches (calls of one
        actor) refuse the rest after a refusal. Missing arguments are pushed by the
        forwarding node (those it names) or pulled from it.
    PushObject: an argument of a task forwarded here, inline when small, else a note
        that the sender holds it (pulled when a client here needs it).
    HasObjects: which of the given objects this node holds.
    FetchObjects: HasObjects, with the small objects found here in the reply (the long
        poll of a node waiting for the results of tasks it forwarded here).
    ReleaseObjects: drop this node's hold on the returns of forwarded tasks (their owner
        has its own copy now).
    FreeObjects: these objects were freed by their owner: drop this node's copies (and
        any hold on them); see ``object_frees.py``.
    Introspect, ListLogs, ReadLog: what the node is doing and its log files
        (``introspect.py``).
    KillActor: kill an actor hosted here (``rayfield.kill`` from another node).
    CancelTask: cancel a task queued or running here, or where this node forwarded it
        (``rayfield.cancel``; ``lifecycle.py``).
    ActorsHeld: whether this node holds a handle to each actor (asked by an actor's home
        before it ends the actor; ``_private/common/actor_scope.py``).
    ActorsReleased: the calling node holds no handle to these actors (homed here) any more.
    CancelJob: the driver of a job exited: cancel its tasks queued here (``lifecycle.py``).
    SyncBundles: sync this node's placement group bundles with the GCS now (a driver
        removed a group: ``bundle_sync.py``).
    DataChannel: the TCP port of this node's data channel (``data_channel.py``; 0: none),
        for the data-channel version the caller speaks.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import grpc

from rayfield._private.node_manager.introspect import LogAccessError
from rayfield._private.node_manager.task_spec import TaskSpec
from rayfield._private.protocol import codec, messages
from rayfield._private.protocol.constants import MAX_MESSAGE_BYTES
from rayfield._private.protocol.errors import GcsInvalidRequestError
from rayfield._private.transport import TlsConfig, TokenInterceptor, auth_metadata, open_channel
from rayfield.store import StoreClient
from rayfield.store.errors import ObjectNotFoundError

__all__ = [
    "MAX_MESSAGE_BYTES",
    "NodeBackend",
    "NodeService",
    "NodeStub",
    "PeerChannels",
    "PeerError",
    "RpcServer",
]

logger = logging.getLogger("rayfield")

SERVICE = "rayfield.Node"
STREAMING_METHODS = frozenset({f"/{SERVICE}/PullObject"})
CHUNK_BYTES = 4 << 20
MAX_WAIT_MS = 5000  # longest HasObjects long poll
FETCH_INLINE_TOTAL_BYTES = 8 << 20  # objects carried whole in one FetchObjects reply
# Tests only: the first ForwardTasks call answers this many seconds late (after queueing
# its tasks), as a peer under load would; the sender's retry must not run them twice.
LATE_FIRST_FORWARD_S = float(os.environ.get("RAYFIELD_TEST_LATE_FORWARD_S") or 0.0)
_RETRYABLE = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)


class PeerError(grpc.RpcError):
    """A call to another node failed (a ``grpc.RpcError``, so callers outside the node
    manager catch it as one).

    Args:
        code: the gRPC status name, e.g. ``"UNAVAILABLE"``.
        details: the status text.
        retryable: the call timed out or did not reach the node; it may have been
            carried out, and may be made again.
    """

    def __init__(self, code: Any, details: str) -> None:
        super().__init__(f"{getattr(code, 'name', code)}: {details}")
        self._code = code
        self._details = details
        self.retryable = code in _RETRYABLE

    def code(self) -> Any:
        return self._code

    def details(self) -> str:
        return self._details

    def __str__(self) -> str:
        return f"{getattr(self._code, 'name', self._code)}: {self._details}"

    @classmethod
    def of(cls, exc: grpc.RpcError) -> PeerError:
        """``exc`` as a PeerError (itself when it is one)."""
        if isinstance(exc, PeerError):
            return exc
        code = exc.code() if callable(getattr(exc, "code", None)) else grpc.StatusCode.UNKNOWN
        details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
        return cls(code, details or "")


def _raw(b: bytes) -> bytes:
    return b


class NodeBackend(Protocol):
    """What the service acts on: the node's store and its agent's operations."""

    store: StoreClient

    def accept_forwarded(self, origin: str, spec: TaskSpec, pushed: list[bytes]) -> None: ...
    def counted(self) -> None: ...
    def release_held(self, ids: list[bytes]) -> None: ...
    def free_objects(self, ids: list[bytes]) -> None: ...
    def receive_push(
        self, object_id: bytes, sender: str, size: int, meta: bytes, data: Any
    ) -> bool: ...
    def cancel_task(self, task_id: bytes, force: bool, hops: int, recursive: bool) -> str: ...
    def cancel_job(self, job_id: bytes) -> int: ...
    def actors_held(self, actor_ids: list[bytes]) -> list[bool]: ...
    def actors_released(self, actor_ids: list[bytes]) -> None: ...
    def sync_bundles(self) -> None: ...
    def introspect(self, objects: bool, max_objects: int) -> dict[str, Any]: ...
    def list_logs(self) -> list[dict[str, Any]]: ...
    def read_log(self, name: str, offset: int, max_bytes: int) -> dict[str, Any]: ...
    def data_port(self, version: int) -> int: ...


class NodeService:
    """Handlers of ``/rayfield.Node``, acting through ``backend``."""

    def __init__(self, backend: NodeBackend) -> None:
        self.backend = backend
        self._late = threading.Event()  # LATE_FIRST_FORWARD_S was served

    def handler(self) -> grpc.GenericRpcHandler:
        unary = {
            "ForwardTasks": self.forward_tasks,
            "HasObjects": self.has_objects,
            "FetchObjects": self.fetch_objects,
            "ReleaseObjects": self.release_objects,
            "FreeObjects": self.free_objects,
            "PushObject": self.push_object,
            "Introspect": self.introspect,
            "ListLogs": self.list_logs,
            "ReadLog": self.read_log,
            "KillActor": self.kill_actor,
            "CancelTask": self.cancel_task,
            "ActorsHeld": self.actors_held,
            "ActorsReleased": self.actors_released,
            "CancelJob": self.cancel_job,
            "SyncBundles": self.sync_bundles,
            "DataChannel": self.data_channel,
        }
        handlers: dict[str, grpc.RpcMethodHandler] = {
            name: grpc.unary_unary_rpc_method_handler(
                self._guard(fn), request_deserializer=_raw, response_serializer=_raw
            )
            for name, fn in unary.items()
        }
        handlers["PullObject"] = grpc.unary_stream_rpc_method_handler(
            self.pull_object, request_deserializer=_raw, response_serializer=_raw
        )
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    @staticmethod
    def _guard(fn: Callable[[bytes], bytes]) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def call(raw: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                return fn(raw)
            except (messages.MalformedMessage, GcsInvalidRequestError, LogAccessError) as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise AssertionError("unreachable")

        return call

    def pull_object(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            object_id, timeout_ms = messages.decode_pull(raw)
        except messages.MalformedMessage as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        [buf] = self.backend.store.get([object_id], timeout_s=max(0, timeout_ms) / 1000)
        if buf is None:
            yield messages.encode_chunk(False)
            return
        view = memoryview(buf)
        try:
            size, meta = len(view), buf.metadata
            yield messages.encode_chunk(True, size, meta, 0, view[:CHUNK_BYTES])
            for off in range(CHUNK_BYTES, size, CHUNK_BYTES):
                yield messages.encode_chunk(True, size, b"", off, view[off : off + CHUNK_BYTES])
        finally:
            view.release()
            buf.release()

    def forward_tasks(self, raw: bytes) -> bytes:
        decoded, in_order = messages.decode_forward_batch(raw)
        tasks = [(origin, TaskSpec.from_native(d), pushed) for origin, d, pushed in decoded]
        replies: list[str | None] = []
        refused = None
        for origin, spec, pushed in tasks:
            if refused is not None and in_order:
                replies.append(f"not run before an earlier call, refused: {refused}")
                continue
            try:
                self.backend.accept_forwarded(origin, spec, pushed)
                replies.append(None)
            except Exception as exc:
                logger.warning("refused a forwarded task: %s", exc)
                refused = f"{type(exc).__name__}: {exc}"
                replies.append(refused)
        if any(spec.involves_actors for _, spec, _ in tasks):
            self.backend.counted()  # the sender drops its holds of these actors on our reply
        if LATE_FIRST_FORWARD_S > 0 and not self._late.is_set():
            self._late.set()
            time.sleep(LATE_FIRST_FORWARD_S)
        return messages.encode_forward_batch_reply(replies)

    def _present(self, ids: list[bytes], wait_ms: int) -> list[bool]:
        store = self.backend.store
        if wait_ms > 0 and ids:
            return list(store.wait(ids, 1, timeout_s=min(wait_ms, MAX_WAIT_MS) / 1000))
        # One round trip for every id: a wait that does not wait answers what is sealed
        # here now, as contains does (it never parks, so no fetch starts for a missing id).
        return list(store.wait(ids, len(ids), timeout_s=0)) if ids else []

    def fetch_objects(self, raw: bytes) -> bytes:
        ids, wait_ms, inline_max = messages.decode_fetch(raw)
        present = self._present(ids, wait_ms)
        here = [oid for oid, p in zip(ids, present, strict=True) if p]
        objects = []
        total = 0
        bufs = self.backend.store.get(here, timeout_s=0) if here else []
        for oid, buf in zip(here, bufs, strict=True):
            if buf is None:
                continue  # freed meanwhile: still announced present; the pull finds out
            try:
                size = len(buf)
                if size <= inline_max and total + size <= FETCH_INLINE_TOTAL_BYTES:
                    with memoryview(buf) as view:
                        objects.append((oid, bytes(buf.metadata), bytes(view)))
                    total += size
            finally:
                buf.release()
        return messages.encode_fetch_reply(present, objects)

    def has_objects(self, raw: bytes) -> bytes:
        ids, wait_ms = messages.decode_ids(raw)
        return messages.encode_present(self._present(ids, wait_ms))

    def release_objects(self, raw: bytes) -> bytes:
        self.backend.release_held(messages.decode_ids(raw)[0])
        return messages.encode_present([])

    def free_objects(self, raw: bytes) -> bytes:
        self.backend.free_objects(messages.decode_ids(raw)[0])
        return messages.encode_present([])

    def kill_actor(self, raw: bytes) -> bytes:
        req = codec.decode("RemoteKillActorRequest", raw)
        try:
            self.backend.store.kill_actor(req["actor_id"], req["no_restart"])
        except ObjectNotFoundError as exc:
            return codec.encode("RemoteKillActorReply", {"killed": False, "message": str(exc)})
        return codec.encode("RemoteKillActorReply", {"killed": True})

    def cancel_task(self, raw: bytes) -> bytes:
        req = codec.decode("RemoteCancelTaskRequest", raw)
        if len(req["task_id"]) != messages.ID_SIZE:
            raise messages.MalformedMessage(f"a task id must be {messages.ID_SIZE} bytes")
        state = self.backend.cancel_task(
            req["task_id"], req["force"], int(req["hops"]), bool(req["recursive"])
        )
        return codec.encode("RemoteCancelTaskReply", {"state": state})

    def cancel_job(self, raw: bytes) -> bytes:
        job_id = codec.decode("CancelJobRequest", raw)["job_id"]
        if not 0 < len(job_id) <= messages.ID_SIZE:
            raise messages.MalformedMessage(f"a job id is 1 to {messages.ID_SIZE} bytes")
        return codec.encode("CancelJobReply", {"cancelled": self.backend.cancel_job(job_id)})

    def actors_held(self, raw: bytes) -> bytes:
        ids = messages.decode_ids(raw)[0]
        return messages.encode_present(self.backend.actors_held(ids))

    def actors_released(self, raw: bytes) -> bytes:
        self.backend.actors_released(messages.decode_ids(raw)[0])
        return messages.encode_present([])

    def sync_bundles(self, raw: bytes) -> bytes:
        self.backend.sync_bundles()
        return messages.encode_present([])

    def push_object(self, raw: bytes) -> bytes:
        object_id, sender, size, meta, data = messages.decode_push(raw)
        held = self.backend.receive_push(object_id, sender, size, meta, data)
        return messages.encode_present([held])

    def introspect(self, raw: bytes) -> bytes:
        req = codec.decode("NodeIntrospectRequest", raw)
        reply = self.backend.introspect(req["objects"], req["max_objects"])
        return codec.encode("NodeIntrospectReply", reply)

    def data_channel(self, raw: bytes) -> bytes:
        req = codec.decode("DataChannelRequest", raw)
        return codec.encode("DataChannelReply", {"port": self.backend.data_port(req["version"])})

    def list_logs(self, raw: bytes) -> bytes:
        codec.decode("NodeIntrospectRequest", raw)
        return codec.encode("ListLogsReply", {"files": self.backend.list_logs()})

    def read_log(self, raw: bytes) -> bytes:
        req = codec.decode("ReadLogRequest", raw)
        reply = self.backend.read_log(req["name"], req["offset"], req["max_bytes"])
        return codec.encode("ReadLogReply", reply)


class RpcServer:
    """The node's gRPC server, serving ``backend`` on ``host:port`` (started).

    Args:
        backend: what the handlers act on.
        token: the cluster token every call must carry.
        host: the address to listen on (and be reached at).
        port: the TCP port; 0 picks a free one.
        tls: mutual TLS (None: plaintext).

    Raises:
        RuntimeError: when the port cannot be bound.
    """

    def __init__(
        self, backend: NodeBackend, token: str, host: str, port: int, tls: TlsConfig | None
    ) -> None:
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=16, thread_name_prefix="rayfield-node-rpc"),
            interceptors=[TokenInterceptor(token, STREAMING_METHODS)],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self._server.add_generic_rpc_handlers((NodeService(backend).handler(),))
        bind = f"{host}:{port}"
        if tls is not None:
            bound = self._server.add_secure_port(bind, tls.server_credentials())
        else:
            bound = self._server.add_insecure_port(bind)
        if bound == 0:
            raise RuntimeError(f"cannot listen on {bind}: is the port in use?")
        self.address = f"{host}:{bound}"
        self._server.start()

    def stop(self, grace_s: float = 0.5) -> None:
        self._server.stop(grace=grace_s).wait()


class PeerChannels:
    """One channel and :class:`NodeStub` per other node, opened on first use.

    Args:
        token: the cluster token, sent with every call.
        tls: mutual TLS for the channels (None: plaintext).
    """

    def __init__(self, token: str, tls: TlsConfig | None) -> None:
        self.tls = tls
        self.metadata = auth_metadata(token)
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel, NodeStub]] = {}

    def stub(self, address: str) -> NodeStub:
        """The stub of the node at ``address``."""
        with self._lock:
            entry = self._channels.get(address)
            if entry is None:
                channel = open_channel(address, self.tls, MAX_MESSAGE_BYTES)
                entry = (channel, NodeStub(channel, self.metadata))
                self._channels[address] = entry
        return entry[1]

    def drop(self, address: str) -> None:
        """Close the channel to ``address`` (that node died)."""
        with self._lock:
            entry = self._channels.pop(address, None)
        if entry is not None:
            entry[0].close()

    def close(self) -> None:
        with self._lock:
            entries, self._channels = list(self._channels.values()), {}
        for channel, _ in entries:
            channel.close()


class NodeStub:
    """Client of another node's ``/rayfield.Node`` service. Every method raises
    :class:`PeerError` when the call fails."""

    def __init__(self, channel: grpc.Channel, metadata: Any) -> None:
        self.metadata = metadata
        names = [
            "ForwardTasks",
            "HasObjects",
            "FetchObjects",
            "ReleaseObjects",
            "FreeObjects",
            "PushObject",
            "Introspect",
            "ListLogs",
            "ReadLog",
            "KillActor",
            "CancelTask",
            "ActorsHeld",
            "ActorsReleased",
            "CancelJob",
            "SyncBundles",
            "DataChannel",
        ]
        self._calls = {n: channel.unary_unary(f"/{SERVICE}/{n}") for n in names}
        self._pull = channel.unary_stream(f"/{SERVICE}/PullObject")

    def _call(self, method: str, raw: bytes, timeout_s: float) -> bytes:
        try:
            return bytes(self._calls[method](raw, metadata=self.metadata, timeout=timeout_s))
        except grpc.RpcError as exc:
            raise PeerError.of(exc) from exc

    def forward_batch(
        self,
        origin: str,
        tasks: Sequence[tuple[TaskSpec, Sequence[bytes]]],
        in_order: bool = False,
        timeout_s: float = 10.0,
    ) -> list[str | None]:
        """Forward several tasks (``(spec, pushed)`` each) in one call; one outcome a task,
        in order: None when accepted, else the refusal's reason. ``in_order``: the
        receiver refuses the rest once one is refused."""
        native = [(spec.to_native(), pushed) for spec, pushed in tasks]
        raw = messages.encode_forward_batch(origin, native, in_order)
        return messages.decode_forward_batch_reply(self._call("ForwardTasks", raw, timeout_s))

    def fetch_objects(
        self, ids: list[bytes], wait_ms: int, inline_max_bytes: int
    ) -> tuple[list[bool], dict[bytes, tuple[bytes, bytes]]]:
        """Which of ``ids`` the node holds (with ``wait_ms``, once one is there, or then),
        and ``{id: (metadata, data)}`` of those up to ``inline_max_bytes``, sent whole."""
        raw = messages.encode_fetch(ids, wait_ms, inline_max_bytes)
        return messages.decode_fetch_reply(self._call("FetchObjects", raw, wait_ms / 1000 + 5))

    def has_objects(self, ids: list[bytes], wait_ms: int = 0) -> list[bool]:
        """Which of ``ids`` the node holds; with ``wait_ms``, once one is there (or then)."""
        raw = self._call("HasObjects", messages.encode_ids(ids, wait_ms), wait_ms / 1000 + 5)
        return list(messages.decode_present(raw))

    def release(self, ids: list[bytes], timeout_s: float = 5.0) -> None:
        """That node may drop its hold on ``ids`` (results this node pulled)."""
        self._call("ReleaseObjects", messages.encode_ids(ids), timeout_s)

    def free(self, ids: list[bytes], timeout_s: float = 5.0) -> None:
        """Their owner freed ``ids``: that node drops its copies."""
        self._call("FreeObjects", messages.encode_ids(ids), timeout_s)

    def push(
        self,
        object_id: bytes,
        sender: str,
        data_size: int,
        metadata: bytes = b"",
        data: Any = None,
        timeout_s: float = 30.0,
    ) -> bool:
        """Push an object (``data``: all of it, inline; None: only say it is here to pull).

        Returns:
            Whether the receiver holds the object now.
        """
        raw = messages.encode_push(object_id, sender, data_size, metadata, data)
        return bool(messages.decode_present(self._call("PushObject", raw, timeout_s))[:1] == [True])

    def pull(self, object_id: bytes, wait_ms: int) -> Iterator[bytes]:
        """The raw chunks of an object (see ``messages.decode_chunk``)."""
        stream = self._pull(
            messages.encode_pull(object_id, wait_ms),
            metadata=self.metadata,
            timeout=wait_ms / 1000 + 600,
        )
        try:
            yield from stream
        except grpc.RpcError as exc:
            raise PeerError.of(exc) from exc

    def introspect(
        self, objects: bool = False, max_objects: int = 0, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """The node's load, workers, running tasks and (``objects``) stored objects."""
        req = {"objects": objects, "max_objects": max_objects}
        raw = self._call("Introspect", codec.encode("NodeIntrospectRequest", req), timeout_s)
        return codec.decode("NodeIntrospectReply", raw)

    def list_logs(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The node's log files: name, size, mtime_s."""
        raw = self._call("ListLogs", codec.encode("NodeIntrospectRequest"), timeout_s)
        return list(codec.decode("ListLogsReply", raw)["files"])

    def read_log(
        self, name: str, offset: int = 0, max_bytes: int = 1 << 20, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """Bytes of one log file: found, size, offset, data (see ``introspect.read_log``)."""
        req = {"name": name, "offset": offset, "max_bytes": max_bytes}
        raw = self._call("ReadLog", codec.encode("ReadLogRequest", req), timeout_s)
        return codec.decode("ReadLogReply", raw)

    def kill_actor(self, actor_id: bytes, no_restart: bool, timeout_s: float = 10.0) -> bool:
        """Kill the actor if that node hosts it; False when it does not."""
        req = {"actor_id": actor_id, "no_restart": no_restart}
        raw = self._call("KillActor", codec.encode("RemoteKillActorRequest", req), timeout_s)
        return bool(codec.decode("RemoteKillActorReply", raw)["killed"])

    def cancel_job(self, job_id: bytes, timeout_s: float = 10.0) -> int:
        """The driver of ``job_id`` exited: that node cancels its queued tasks (and those
        forwarded to it later); returns how many it cancelled."""
        raw = self._call(
            "CancelJob", codec.encode("CancelJobRequest", {"job_id": job_id}), timeout_s
        )
        return int(codec.decode("CancelJobReply", raw)["cancelled"])

    def actors_held(self, actor_ids: list[bytes], timeout_s: float = 10.0) -> list[bool]:
        """Whether that node holds a handle to each actor."""
        raw = self._call("ActorsHeld", messages.encode_ids(actor_ids), timeout_s)
        return list(messages.decode_present(raw))

    def actors_released(self, actor_ids: list[bytes], timeout_s: float = 10.0) -> None:
        """Tell that node (the actors' home) that this node holds no handle to them."""
        self._call("ActorsReleased", messages.encode_ids(actor_ids), timeout_s)

    def sync_bundles(self, timeout_s: float = 10.0) -> None:
        """That node syncs its placement group bundles with the GCS now (the groups
        removed meanwhile are released there and their work ended) and answers after."""
        self._call("SyncBundles", messages.encode_ids([]), timeout_s)

    def cancel_task(
        self,
        task_id: bytes,
        force: bool,
        hops: int = 4,
        timeout_s: float = 10.0,
        recursive: bool = True,
    ) -> str:
        """Cancel a task on that node or where it forwarded it (at most ``hops`` further
        nodes), with the tasks it submitted when ``recursive``: "queued", "running" or
        "done" (see ``lifecycle.Lifecycle.cancel``)."""
        req = {"task_id": task_id, "force": force, "hops": hops, "recursive": recursive}
        raw = self._call("CancelTask", codec.encode("RemoteCancelTaskRequest", req), timeout_s)
        return str(codec.decode("RemoteCancelTaskReply", raw)["state"])

    def data_port(self, version: int, timeout_s: float = 5.0) -> int:
        """The port of that node's data channel for protocol ``version``; 0 when it has
        none (switched off, another version, or a node without the method)."""
        req = codec.encode("DataChannelRequest", {"version": version})
        try:
            raw = self._call("DataChannel", req, timeout_s)
        except PeerError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return 0
            raise
        return int(codec.decode("DataChannelReply", raw)["port"])
