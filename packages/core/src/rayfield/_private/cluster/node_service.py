"""The gRPC service a node offers to other nodes: ``/rayfield.Node/<Method>``.

Payloads are flatbuffers (``schema/cluster.fbs``, see ``messages.py``) through grpcio's
generic handlers. The cluster token is checked by ``TokenInterceptor`` before any payload
is decoded; a payload that does not decode is answered with ``INVALID_ARGUMENT``.

Methods:
    PullObject (response stream): the object's chunks, waiting for it to be sealed here
        up to the request's timeout.
    ForwardTasks: queue tasks that another node could not place or moved here
        (``forwarding.py``), one reply each, in order; ``in_order`` batches (calls of one
        actor) refuse the rest after a refusal. Missing arguments are pushed by the
        forwarding node (those it names) or pulled from it.
    PushObject: an object this node wants (a forwarded task's result, an argument of a
        task forwarded here), inline when small, else a note to pull it now.
    HasObjects: which of the given objects this node holds.
    FetchObjects: HasObjects, with the small objects found here in the reply (the long
        poll of a node waiting for the results of tasks it forwarded here).
    ReleaseObjects: drop this node's hold on the returns of forwarded tasks (their owner
        has its own copy now).
    Introspect, ListLogs, ReadLog: what the node is doing and its log files
        (``introspect.py``).
    KillActor: kill an actor hosted here (``rayfield.kill`` from another node).
    CancelTask: cancel a task queued or running here, or where this node forwarded it
        (``rayfield.cancel``; ``lifecycle.py``).
    ActorsHeld: whether this node holds a handle to each actor (asked by an actor's home
        before it ends the actor; ``_private/actor_scope.py``).
    ActorsReleased: the calling node holds no handle to these actors (homed here) any more.
    CancelJob: the driver of a job exited: cancel its tasks queued here (``lifecycle.py``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from rayfield._private.cluster.introspect import LogAccessError
from rayfield._private.protocol import codec, messages
from rayfield._private.protocol.errors import GcsInvalidRequestError
from rayfield.store.errors import ObjectNotFoundError

if TYPE_CHECKING:
    from rayfield._private.cluster.agent import NodeAgent

logger = logging.getLogger("rayfield")

SERVICE = "rayfield.Node"
STREAMING_METHODS = frozenset({f"/{SERVICE}/PullObject"})
CHUNK_BYTES = 4 << 20
MAX_WAIT_MS = 5000  # longest HasObjects long poll
FETCH_INLINE_TOTAL_BYTES = 8 << 20  # objects carried whole in one FetchObjects reply
# Tests only: the first ForwardTasks call answers this many seconds late (after queueing
# its tasks), as a peer under load would; the sender's retry must not run them twice.
LATE_FIRST_FORWARD_S = float(os.environ.get("RAYFIELD_TEST_LATE_FORWARD_S") or 0.0)


def _raw(b: bytes) -> bytes:
    return b


class NodeService:
    """Handlers of ``/rayfield.Node``, acting on the node's store through ``agent``."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent
        self._late = threading.Event()  # LATE_FIRST_FORWARD_S was served

    def handler(self) -> grpc.GenericRpcHandler:
        unary = {
            "ForwardTasks": self.forward_tasks,
            "HasObjects": self.has_objects,
            "FetchObjects": self.fetch_objects,
            "ReleaseObjects": self.release_objects,
            "PushObject": self.push_object,
            "Introspect": self.introspect,
            "ListLogs": self.list_logs,
            "ReadLog": self.read_log,
            "KillActor": self.kill_actor,
            "CancelTask": self.cancel_task,
            "ActorsHeld": self.actors_held,
            "ActorsReleased": self.actors_released,
            "CancelJob": self.cancel_job,
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
        client = self.agent.client
        [buf] = client.get([object_id], timeout_s=max(0, timeout_ms) / 1000)
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
        tasks, in_order = messages.decode_forward_batch(raw)
        replies: list[str | None] = []
        refused = None
        for origin, spec, pushed in tasks:
            if refused is not None and in_order:
                replies.append(f"not run before an earlier call, refused: {refused}")
                continue
            try:
                self.agent.accept_forwarded(origin, spec, pushed)
                replies.append(None)
            except Exception as exc:
                logger.warning("refused a forwarded task: %s", exc)
                refused = f"{type(exc).__name__}: {exc}"
                replies.append(refused)
        if any(spec.get("actor_id") or spec.get("actor_handles") for _, spec, _ in tasks):
            self.agent.counted()  # the sender drops its holds of these actors on our reply
        if LATE_FIRST_FORWARD_S > 0 and not self._late.is_set():
            self._late.set()
            time.sleep(LATE_FIRST_FORWARD_S)
        return messages.encode_forward_batch_reply(replies)

    def fetch_objects(self, raw: bytes) -> bytes:
        ids, wait_ms, inline_max = messages.decode_fetch(raw)
        client = self.agent.client
        if wait_ms > 0 and ids:
            present = client.wait(ids, 1, timeout_s=min(wait_ms, MAX_WAIT_MS) / 1000)
        else:
            present = [client.contains(oid) for oid in ids]
        here = [oid for oid, p in zip(ids, present, strict=True) if p]
        objects = []
        total = 0
        for oid, buf in zip(here, client.get(here, timeout_s=0) if here else [], strict=True):
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
        client = self.agent.client
        if wait_ms > 0 and ids:
            ready = client.wait(ids, 1, timeout_s=min(wait_ms, MAX_WAIT_MS) / 1000)
            return messages.encode_present(ready)
        return messages.encode_present([client.contains(oid) for oid in ids])

    def release_objects(self, raw: bytes) -> bytes:
        self.agent.release_held(messages.decode_ids(raw)[0])
        return messages.encode_present([])

    def kill_actor(self, raw: bytes) -> bytes:
        req = codec.decode("RemoteKillActorRequest", raw)
        try:
            self.agent.client.kill_actor(req["actor_id"], req["no_restart"])
        except ObjectNotFoundError as exc:
            return codec.encode("RemoteKillActorReply", {"killed": False, "message": str(exc)})
        return codec.encode("RemoteKillActorReply", {"killed": True})

    def cancel_task(self, raw: bytes) -> bytes:
        req = codec.decode("RemoteCancelTaskRequest", raw)
        if len(req["task_id"]) != messages.ID_SIZE:
            raise messages.MalformedMessage(f"a task id must be {messages.ID_SIZE} bytes")
        state = self.agent.lifecycle.cancel(
            req["task_id"], req["force"], int(req["hops"]), bool(req["recursive"])
        )
        return codec.encode("RemoteCancelTaskReply", {"state": state})

    def cancel_job(self, raw: bytes) -> bytes:
        job_id = codec.decode("CancelJobRequest", raw)["job_id"]
        if not 0 < len(job_id) <= messages.ID_SIZE:
            raise messages.MalformedMessage(f"a job id is 1 to {messages.ID_SIZE} bytes")
        return codec.encode(
            "CancelJobReply", {"cancelled": self.agent.lifecycle.cancel_job(job_id)}
        )

    def actors_held(self, raw: bytes) -> bytes:
        ids = messages.decode_ids(raw)[0]
        return messages.encode_present(self.agent.node.server.actors_held(ids))

    def actors_released(self, raw: bytes) -> bytes:
        self.agent.lifecycle.peers_released(messages.decode_ids(raw)[0])
        return messages.encode_present([])

    def push_object(self, raw: bytes) -> bytes:
        object_id, sender, size, meta, data = messages.decode_push(raw)
        held = self.agent.receive_push(object_id, sender, size, meta, data)
        return messages.encode_present([held])

    def introspect(self, raw: bytes) -> bytes:
        req = codec.decode("NodeIntrospectRequest", raw)
        reply = self.agent.introspector.introspect(req["objects"], req["max_objects"])
        return codec.encode("NodeIntrospectReply", reply)

    def list_logs(self, raw: bytes) -> bytes:
        codec.decode("NodeIntrospectRequest", raw)
        return codec.encode("ListLogsReply", {"files": self.agent.introspector.list_logs()})

    def read_log(self, raw: bytes) -> bytes:
        req = codec.decode("ReadLogRequest", raw)
        reply = self.agent.introspector.read_log(req["name"], req["offset"], req["max_bytes"])
        return codec.encode("ReadLogReply", reply)


class NodeStub:
    """Client of another node's ``/rayfield.Node`` service."""

    def __init__(self, channel: grpc.Channel, metadata: Any) -> None:
        self.metadata = metadata
        call = channel.unary_unary
        self._forward_batch = call(f"/{SERVICE}/ForwardTasks")
        self._has = call(f"/{SERVICE}/HasObjects")
        self._fetch = call(f"/{SERVICE}/FetchObjects")
        self._release = call(f"/{SERVICE}/ReleaseObjects")
        self._push = call(f"/{SERVICE}/PushObject")
        self._introspect = call(f"/{SERVICE}/Introspect")
        self._list_logs = call(f"/{SERVICE}/ListLogs")
        self._read_log = call(f"/{SERVICE}/ReadLog")
        self._kill_actor = call(f"/{SERVICE}/KillActor")
        self._cancel_task = call(f"/{SERVICE}/CancelTask")
        self._actors_held = call(f"/{SERVICE}/ActorsHeld")
        self._actors_released = call(f"/{SERVICE}/ActorsReleased")
        self._cancel_job = call(f"/{SERVICE}/CancelJob")
        self._pull = channel.unary_stream(f"/{SERVICE}/PullObject")

    def forward_batch(
        self,
        origin: str,
        tasks: Sequence[tuple[dict[str, Any], Sequence[bytes]]],
        in_order: bool = False,
        timeout_s: float = 10.0,
    ) -> list[str | None]:
        """Forward several tasks (``(spec, pushed)`` each) in one call; one outcome a task,
        in order: None when accepted, else the refusal's reason. ``in_order``: the
        receiver refuses the rest once one is refused."""
        raw = self._forward_batch(
            messages.encode_forward_batch(origin, tasks, in_order),
            metadata=self.metadata,
            timeout=timeout_s,
        )
        return messages.decode_forward_batch_reply(raw)

    def fetch_objects(
        self, ids: list[bytes], wait_ms: int, inline_max_bytes: int
    ) -> tuple[list[bool], dict[bytes, tuple[bytes, bytes]]]:
        """Which of ``ids`` the node holds (with ``wait_ms``, once one is there, or then),
        and ``{id: (metadata, data)}`` of those up to ``inline_max_bytes``, sent whole."""
        raw = self._fetch(
            messages.encode_fetch(ids, wait_ms, inline_max_bytes),
            metadata=self.metadata,
            timeout=wait_ms / 1000 + 5,
        )
        return messages.decode_fetch_reply(raw)

    def has_objects(self, ids: list[bytes], wait_ms: int = 0) -> list[bool]:
        """Which of ``ids`` the node holds; with ``wait_ms``, once one is there (or then)."""
        raw = self._has(
            messages.encode_ids(ids, wait_ms), metadata=self.metadata, timeout=wait_ms / 1000 + 5
        )
        return list(messages.decode_present(raw))

    def release(self, ids: list[bytes], timeout_s: float = 5.0) -> None:
        self._release(messages.encode_ids(ids), metadata=self.metadata, timeout=timeout_s)

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
        raw = self._push(
            messages.encode_push(object_id, sender, data_size, metadata, data),
            metadata=self.metadata,
            timeout=timeout_s,
        )
        return bool(messages.decode_present(raw)[:1] == [True])

    def pull(self, object_id: bytes, wait_ms: int) -> Iterator[bytes]:
        """The raw chunks of an object (see ``messages.decode_chunk``)."""
        return self._pull(
            messages.encode_pull(object_id, wait_ms),
            metadata=self.metadata,
            timeout=wait_ms / 1000 + 600,
        )

    def introspect(
        self, objects: bool = False, max_objects: int = 0, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """The node's load, workers, running tasks and (``objects``) stored objects."""
        raw = self._introspect(
            codec.encode("NodeIntrospectRequest", {"objects": objects, "max_objects": max_objects}),
            metadata=self.metadata,
            timeout=timeout_s,
        )
        return codec.decode("NodeIntrospectReply", raw)

    def list_logs(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The node's log files: name, size, mtime_s."""
        raw = self._list_logs(
            codec.encode("NodeIntrospectRequest"), metadata=self.metadata, timeout=timeout_s
        )
        return list(codec.decode("ListLogsReply", raw)["files"])

    def read_log(
        self, name: str, offset: int = 0, max_bytes: int = 1 << 20, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """Bytes of one log file: found, size, offset, data (see ``introspect.read_log``)."""
        raw = self._read_log(
            codec.encode(
                "ReadLogRequest", {"name": name, "offset": offset, "max_bytes": max_bytes}
            ),
            metadata=self.metadata,
            timeout=timeout_s,
        )
        return codec.decode("ReadLogReply", raw)

    def kill_actor(self, actor_id: bytes, no_restart: bool, timeout_s: float = 10.0) -> bool:
        """Kill the actor if that node hosts it; False when it does not."""
        raw = self._kill_actor(
            codec.encode(
                "RemoteKillActorRequest", {"actor_id": actor_id, "no_restart": no_restart}
            ),
            metadata=self.metadata,
            timeout=timeout_s,
        )
        return bool(codec.decode("RemoteKillActorReply", raw)["killed"])

    def cancel_job(self, job_id: bytes, timeout_s: float = 10.0) -> int:
        """The driver of ``job_id`` exited: that node cancels its queued tasks (and those
        forwarded to it later); returns how many it cancelled."""
        raw = self._cancel_job(
            codec.encode("CancelJobRequest", {"job_id": job_id}),
            metadata=self.metadata,
            timeout=timeout_s,
        )
        return int(codec.decode("CancelJobReply", raw)["cancelled"])

    def actors_held(self, actor_ids: list[bytes], timeout_s: float = 10.0) -> list[bool]:
        """Whether that node holds a handle to each actor."""
        raw = self._actors_held(
            messages.encode_ids(actor_ids), metadata=self.metadata, timeout=timeout_s
        )
        return list(messages.decode_present(raw))

    def actors_released(self, actor_ids: list[bytes], timeout_s: float = 10.0) -> None:
        """Tell that node (the actors' home) that this node holds no handle to them."""
        self._actors_released(
            messages.encode_ids(actor_ids), metadata=self.metadata, timeout=timeout_s
        )

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
        raw = self._cancel_task(
            codec.encode("RemoteCancelTaskRequest", req),
            metadata=self.metadata,
            timeout=timeout_s,
        )
        return str(codec.decode("RemoteCancelTaskReply", raw)["state"])
