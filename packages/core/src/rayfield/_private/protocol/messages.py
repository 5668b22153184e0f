"""Encode and decode the node-to-node messages of ``schema/cluster.fbs``.

These are the hot messages between nodes (tasks forwarded, objects fetched, pushed and
pulled); each is built by a function written for its table, on the codec's primitives
for ids, resources and vectors (``codec.id_vector``, ``resource_vector``,
``offset_vector``), so both encoders write those the same way. The node's other
messages (introspection, logs, kill, cancel) go through ``codec.encode`` and ``SPECS``.

Every ``decode_*`` raises :class:`MalformedMessage` for a payload that is not a valid
message of its type (truncated, out-of-range offsets, missing fields), never another
exception, so a service can answer ``INVALID_ARGUMENT`` and go on serving.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flatbuffers

from rayfield._private.protocol.codec import id_vector, offset_vector, resource_vector
from rayfield._private.protocol.constants import ID_SIZE, RESOURCE_UNIT
from rayfield.store.protocol.fb import (
    FetchedObject,
    FetchObjectsReply,
    FetchObjectsRequest,
    ForwardBatchReply,
    ForwardBatchRequest,
    ForwardTaskReply,
    ForwardTaskRequest,
    HasObjectsReply,
    ObjectChunk,
    ObjectIdsRequest,
    PullObjectRequest,
    PushObjectRequest,
    SubmitTaskRequest,
    UniqueID,
)

__all__ = ["ID_SIZE", "RESOURCE_UNIT", "MalformedMessage"]


# flatc 25.12.19 names this CreateUniqueId in the module and CreateUniqueID in its stub.
_create_id: Callable[[flatbuffers.Builder, bytes], int] = UniqueID.CreateUniqueId  # type: ignore[attr-defined]


class MalformedMessage(ValueError):
    """A payload that does not decode as the expected message."""


def _decoder(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(buf: bytes) -> Any:
        if len(buf) < 8:
            raise MalformedMessage(f"{fn.__name__}: {len(buf)} bytes is too short for a message")
        try:
            return fn(buf)
        except MalformedMessage:
            raise
        except Exception as exc:
            raise MalformedMessage(f"{fn.__name__}: {type(exc).__name__}: {exc}") from None

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _check_id(oid: bytes) -> bytes:
    if len(oid) != ID_SIZE:
        raise MalformedMessage(f"an id must be {ID_SIZE} bytes, got {len(oid)}")
    return oid


def _read_id(s: Any) -> bytes | None:
    return None if s is None else bytes(s.BytesAsNumpy().tobytes())


def _read_ids(n: int, get: Callable[[int], Any]) -> list[bytes]:
    """A vector of UniqueID structs (``n``, accessor ``get``), read as one block."""
    if n <= 0:
        return []
    first = get(0)._tab
    block = bytes(first.Bytes[first.Pos : first.Pos + ID_SIZE * n])
    if len(block) != ID_SIZE * n:
        raise MalformedMessage(f"a vector of {n} ids runs past the end of the message")
    return [block[i : i + ID_SIZE] for i in range(0, len(block), ID_SIZE)]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _finish(b: flatbuffers.Builder, root: int) -> bytes:
    b.Finish(root)
    return bytes(b.Output())


# ---- PullObject ----------------------------------------------------------------------


def encode_pull(object_id: bytes, timeout_ms: int) -> bytes:
    b = flatbuffers.Builder(64)
    PullObjectRequest.PullObjectRequestStart(b)
    PullObjectRequest.PullObjectRequestAddObjectId(b, _create_id(b, object_id))
    PullObjectRequest.PullObjectRequestAddTimeoutMs(b, timeout_ms)
    return _finish(b, PullObjectRequest.PullObjectRequestEnd(b))


@_decoder
def decode_pull(buf: bytes) -> tuple[bytes, int]:
    """``(object_id, timeout_ms)``."""
    r = PullObjectRequest.PullObjectRequest.GetRootAs(buf, 0)
    oid = _read_id(r.ObjectId())
    if oid is None:
        raise MalformedMessage("PullObjectRequest without object_id")
    return oid, int(r.TimeoutMs())


def encode_chunk(
    found: bool, data_size: int = 0, metadata: bytes = b"", offset: int = 0, data: Any = b""
) -> bytes:
    """A chunk message: length-prefixed ObjectChunk table, then ``data`` raw."""
    b = flatbuffers.Builder(128 + len(metadata))
    meta_vec = b.CreateByteVector(metadata) if metadata else None
    ObjectChunk.ObjectChunkStart(b)
    ObjectChunk.ObjectChunkAddFound(b, found)
    ObjectChunk.ObjectChunkAddDataSize(b, data_size)
    ObjectChunk.ObjectChunkAddOffset(b, offset)
    if meta_vec is not None:
        ObjectChunk.ObjectChunkAddMetadata(b, meta_vec)
    b.Finish(ObjectChunk.ObjectChunkEnd(b))
    table = b.Output()
    return b"".join((len(table).to_bytes(4, "little"), table, data))


@_decoder
def decode_chunk(buf: bytes) -> tuple[bool, int, bytes, int, memoryview]:
    """``(found, data_size, metadata, offset, data)``; ``data`` is a view into ``buf``."""
    n = int.from_bytes(buf[:4], "little")
    if n > len(buf) - 4:
        raise MalformedMessage(f"chunk table of {n} bytes in a message of {len(buf)}")
    c = ObjectChunk.ObjectChunk.GetRootAs(buf[4 : 4 + n], 0)
    meta = b"" if c.MetadataIsNone() else c.MetadataAsNumpy().tobytes()
    return bool(c.Found()), int(c.DataSize()), meta, int(c.Offset()), memoryview(buf)[4 + n :]


# ---- ForwardTasks --------------------------------------------------------------------


def _build_forward(
    b: flatbuffers.Builder, origin_off: int, spec: dict[str, Any], pushed: Sequence[bytes]
) -> int:
    payload: bytes = spec["payload"]
    pushed_off = id_vector(b, pushed)
    payload_off = b.CreateByteVector(payload)
    resources = resource_vector(b, spec.get("resources", {}))
    deps = id_vector(b, spec.get("dependencies", []))
    rets = id_vector(b, spec.get("return_ids", []))
    handles = spec.get("actor_handles") or []
    handles_off = id_vector(b, handles)
    SubmitTaskRequest.SubmitTaskRequestStart(b)
    SubmitTaskRequest.SubmitTaskRequestAddTaskId(b, _create_id(b, spec["task_id"]))
    SubmitTaskRequest.SubmitTaskRequestAddResources(b, resources)
    SubmitTaskRequest.SubmitTaskRequestAddDependencies(b, deps)
    if spec.get("actor_id"):
        SubmitTaskRequest.SubmitTaskRequestAddActorId(b, _create_id(b, spec["actor_id"]))
    SubmitTaskRequest.SubmitTaskRequestAddActorCreation(b, bool(spec.get("actor_creation")))
    SubmitTaskRequest.SubmitTaskRequestAddMaxConcurrency(b, int(spec.get("max_concurrency", 1)))
    if spec.get("caller_id"):
        SubmitTaskRequest.SubmitTaskRequestAddCallerId(b, _create_id(b, spec["caller_id"]))
    SubmitTaskRequest.SubmitTaskRequestAddSequenceNo(b, int(spec.get("sequence_no", 0)))
    SubmitTaskRequest.SubmitTaskRequestAddPayload(b, payload_off)
    SubmitTaskRequest.SubmitTaskRequestAddReturnIds(b, rets)
    SubmitTaskRequest.SubmitTaskRequestAddMaxRetries(b, int(spec.get("max_retries", 0)))
    if handles:
        SubmitTaskRequest.SubmitTaskRequestAddActorHandles(b, handles_off)
    task = SubmitTaskRequest.SubmitTaskRequestEnd(b)
    ForwardTaskRequest.ForwardTaskRequestStart(b)
    ForwardTaskRequest.ForwardTaskRequestAddOrigin(b, origin_off)
    ForwardTaskRequest.ForwardTaskRequestAddTask(b, task)
    ForwardTaskRequest.ForwardTaskRequestAddPushed(b, pushed_off)
    return int(ForwardTaskRequest.ForwardTaskRequestEnd(b))


def _read_forward(r: Any) -> tuple[str, dict[str, Any], list[bytes]]:
    t = r.Task()
    task_id = _read_id(t.TaskId()) if t is not None else None
    if t is None or task_id is None or r.Origin() is None:
        raise MalformedMessage("ForwardTaskRequest needs origin, task and task_id")
    resources = {}
    for j in range(t.ResourcesLength()):
        ra = t.Resources(j)
        if ra is None or ra.Name() is None:
            raise MalformedMessage("a resource amount without a name")
        resources[_text(ra.Name())] = ra.Amount() / RESOURCE_UNIT
    spec = {
        "task_id": _check_id(task_id),
        "payload": b"" if t.PayloadIsNone() else t.PayloadAsNumpy().tobytes(),
        "resources": resources,
        "dependencies": _read_ids(t.DependenciesLength(), t.Dependencies),
        "actor_id": _read_id(t.ActorId()),
        "actor_creation": bool(t.ActorCreation()),
        "max_concurrency": int(t.MaxConcurrency()),
        "caller_id": _read_id(t.CallerId()),
        "sequence_no": int(t.SequenceNo()),
        "return_ids": _read_ids(t.ReturnIdsLength(), t.ReturnIds),
        "max_retries": int(t.MaxRetries()),
        "actor_handles": _read_ids(t.ActorHandlesLength(), t.ActorHandles),
    }
    return _text(r.Origin()), spec, _read_ids(r.PushedLength(), r.Pushed)


def encode_forward_batch(
    origin: str, tasks: Sequence[tuple[dict[str, Any], Sequence[bytes]]], in_order: bool = False
) -> bytes:
    """Tasks forwarded by ``origin`` in one message: ``(spec, pushed)`` each, ``spec`` the
    dict of ``NodeServer.take_task`` and ``pushed`` the arguments the origin will push;
    ``in_order``: refuse the rest once one is refused."""
    size = sum(len(spec["payload"]) + 512 + 24 * len(pushed) for spec, pushed in tasks)
    b = flatbuffers.Builder(size + 64)
    origin_off = b.CreateString(origin)
    offs = [_build_forward(b, origin_off, spec, pushed) for spec, pushed in tasks]
    vec = offset_vector(b, offs)
    ForwardBatchRequest.ForwardBatchRequestStart(b)
    ForwardBatchRequest.ForwardBatchRequestAddTasks(b, vec)
    ForwardBatchRequest.ForwardBatchRequestAddInOrder(b, in_order)
    return _finish(b, ForwardBatchRequest.ForwardBatchRequestEnd(b))


@_decoder
def decode_forward_batch(buf: bytes) -> tuple[list[tuple[str, dict[str, Any], list[bytes]]], bool]:
    """``([(origin, spec, pushed), ...], in_order)``: ``spec`` with the keys of
    ``StoreClient.submit_task``, ``pushed`` the arguments the origin will push."""
    r = ForwardBatchRequest.ForwardBatchRequest.GetRootAs(buf, 0)
    tasks = []
    for j in range(r.TasksLength()):
        t = r.Tasks(j)
        if t is None:
            raise MalformedMessage("a ForwardBatchRequest with an empty task")
        tasks.append(_read_forward(t))
    return tasks, bool(r.InOrder())


def encode_forward_batch_reply(replies: Sequence[str | None]) -> bytes:
    """One reply a task, in order: None when accepted, else why it was refused."""
    b = flatbuffers.Builder(64 + 32 * len(replies))
    offs = []
    for why in replies:
        msg = b.CreateString(why or "")
        ForwardTaskReply.ForwardTaskReplyStart(b)
        ForwardTaskReply.ForwardTaskReplyAddAccepted(b, why is None)
        ForwardTaskReply.ForwardTaskReplyAddMessage(b, msg)
        offs.append(ForwardTaskReply.ForwardTaskReplyEnd(b))
    vec = offset_vector(b, offs)
    ForwardBatchReply.ForwardBatchReplyStart(b)
    ForwardBatchReply.ForwardBatchReplyAddReplies(b, vec)
    return _finish(b, ForwardBatchReply.ForwardBatchReplyEnd(b))


@_decoder
def decode_forward_batch_reply(buf: bytes) -> list[str | None]:
    r = ForwardBatchReply.ForwardBatchReply.GetRootAs(buf, 0)
    out: list[str | None] = []
    for j in range(r.RepliesLength()):
        x = r.Replies(j)
        if x is None:
            raise MalformedMessage("a ForwardBatchReply with an empty reply")
        out.append(None if x.Accepted() else _text(x.Message() or b""))
    return out


# ---- PushObject ----------------------------------------------------------------------


def encode_push(
    object_id: bytes, sender: str, data_size: int, metadata: bytes = b"", data: Any = None
) -> bytes:
    """A push from the node at ``sender``: length-prefixed PushObjectRequest, then ``data``
    raw when given (the whole object inline); without ``data`` it only says the sender
    holds the object (to be pulled)."""
    b = flatbuffers.Builder(128 + len(metadata))
    meta_vec = b.CreateByteVector(metadata) if metadata else None
    sender_off = b.CreateString(sender)
    PushObjectRequest.PushObjectRequestStart(b)
    PushObjectRequest.PushObjectRequestAddObjectId(b, _create_id(b, object_id))
    PushObjectRequest.PushObjectRequestAddSender(b, sender_off)
    PushObjectRequest.PushObjectRequestAddDataSize(b, data_size)
    if meta_vec is not None:
        PushObjectRequest.PushObjectRequestAddMetadata(b, meta_vec)
    PushObjectRequest.PushObjectRequestAddDataInline(b, data is not None)
    b.Finish(PushObjectRequest.PushObjectRequestEnd(b))
    table = b.Output()
    return b"".join((len(table).to_bytes(4, "little"), table, b"" if data is None else data))


@_decoder
def decode_push(buf: bytes) -> tuple[bytes, str, int, bytes, memoryview | None]:
    """``(object_id, sender, data_size, metadata, data)``; ``data`` (a view into ``buf``)
    is None when the object did not come inline.

    Raises:
        MalformedMessage: also when inline data is not exactly ``data_size`` bytes.
    """
    n = int.from_bytes(buf[:4], "little")
    if n > len(buf) - 4:
        raise MalformedMessage(f"push table of {n} bytes in a message of {len(buf)}")
    r = PushObjectRequest.PushObjectRequest.GetRootAs(buf[4 : 4 + n], 0)
    oid = _read_id(r.ObjectId())
    if oid is None or r.Sender() is None:
        raise MalformedMessage("PushObjectRequest needs object_id and sender")
    meta = b"" if r.MetadataIsNone() else r.MetadataAsNumpy().tobytes()
    size = int(r.DataSize())
    if not r.DataInline():
        return _check_id(oid), _text(r.Sender()), size, meta, None
    data = memoryview(buf)[4 + n :]
    if len(data) != size:
        raise MalformedMessage(f"push of {size} bytes carries {len(data)}")
    return _check_id(oid), _text(r.Sender()), size, meta, data


# ---- HasObjects / ReleaseObjects -----------------------------------------------------


def encode_ids(ids: Sequence[bytes], wait_ms: int = 0) -> bytes:
    b = flatbuffers.Builder(32 + 24 * len(ids))
    vec = id_vector(b, ids)
    ObjectIdsRequest.ObjectIdsRequestStart(b)
    ObjectIdsRequest.ObjectIdsRequestAddObjectIds(b, vec)
    ObjectIdsRequest.ObjectIdsRequestAddWaitMs(b, wait_ms)
    return _finish(b, ObjectIdsRequest.ObjectIdsRequestEnd(b))


@_decoder
def decode_ids(buf: bytes) -> tuple[list[bytes], int]:
    """``(object_ids, wait_ms)``."""
    r = ObjectIdsRequest.ObjectIdsRequest.GetRootAs(buf, 0)
    return _read_ids(r.ObjectIdsLength(), r.ObjectIds), int(r.WaitMs())


def encode_present(present: Sequence[bool]) -> bytes:
    b = flatbuffers.Builder(32 + len(present))
    vec = b.CreateByteVector(bytes(bytearray(1 if p else 0 for p in present)))
    HasObjectsReply.HasObjectsReplyStart(b)
    HasObjectsReply.HasObjectsReplyAddPresent(b, vec)
    return _finish(b, HasObjectsReply.HasObjectsReplyEnd(b))


@_decoder
def decode_present(buf: bytes) -> list[bool]:
    r = HasObjectsReply.HasObjectsReply.GetRootAs(buf, 0)
    n = r.PresentLength()
    return [bool(v) for v in r.PresentAsNumpy().tobytes()] if n else []


# ---- FetchObjects --------------------------------------------------------------------


def encode_fetch(ids: Sequence[bytes], wait_ms: int, inline_max_bytes: int) -> bytes:
    b = flatbuffers.Builder(48 + 24 * len(ids))
    vec = id_vector(b, ids)
    FetchObjectsRequest.FetchObjectsRequestStart(b)
    FetchObjectsRequest.FetchObjectsRequestAddObjectIds(b, vec)
    FetchObjectsRequest.FetchObjectsRequestAddWaitMs(b, wait_ms)
    FetchObjectsRequest.FetchObjectsRequestAddInlineMaxBytes(b, inline_max_bytes)
    return _finish(b, FetchObjectsRequest.FetchObjectsRequestEnd(b))


@_decoder
def decode_fetch(buf: bytes) -> tuple[list[bytes], int, int]:
    """``(object_ids, wait_ms, inline_max_bytes)``."""
    r = FetchObjectsRequest.FetchObjectsRequest.GetRootAs(buf, 0)
    ids = _read_ids(r.ObjectIdsLength(), r.ObjectIds)
    return ids, int(r.WaitMs()), int(r.InlineMaxBytes())


def encode_fetch_reply(
    present: Sequence[bool], objects: Sequence[tuple[bytes, bytes, bytes]]
) -> bytes:
    """``present``: a flag a requested id; ``objects``: ``(object_id, metadata, data)`` of
    those sent whole."""
    size = sum(len(m) + len(d) + 64 for _, m, d in objects)
    b = flatbuffers.Builder(64 + len(present) + size)
    offs = []
    for oid, meta, data in objects:
        meta_off = b.CreateByteVector(meta)
        data_off = b.CreateByteVector(data)
        FetchedObject.FetchedObjectStart(b)
        FetchedObject.FetchedObjectAddObjectId(b, _create_id(b, oid))
        FetchedObject.FetchedObjectAddMetadata(b, meta_off)
        FetchedObject.FetchedObjectAddData(b, data_off)
        offs.append(FetchedObject.FetchedObjectEnd(b))
    objects_vec = offset_vector(b, offs)
    present_vec = b.CreateByteVector(bytes(bytearray(1 if p else 0 for p in present)))
    FetchObjectsReply.FetchObjectsReplyStart(b)
    FetchObjectsReply.FetchObjectsReplyAddPresent(b, present_vec)
    FetchObjectsReply.FetchObjectsReplyAddObjects(b, objects_vec)
    return _finish(b, FetchObjectsReply.FetchObjectsReplyEnd(b))


@_decoder
def decode_fetch_reply(buf: bytes) -> tuple[list[bool], dict[bytes, tuple[bytes, bytes]]]:
    """``(present, {object_id: (metadata, data)})``."""
    r = FetchObjectsReply.FetchObjectsReply.GetRootAs(buf, 0)
    present = [bool(v) for v in r.PresentAsNumpy().tobytes()] if r.PresentLength() else []
    objects = {}
    for j in range(r.ObjectsLength()):
        o = r.Objects(j)
        oid = _read_id(o.ObjectId()) if o is not None else None
        if o is None or oid is None:
            raise MalformedMessage("a FetchedObject without object_id")
        meta = o.MetadataAsNumpy().tobytes() if o.MetadataLength() else b""
        data = o.DataAsNumpy().tobytes() if o.DataLength() else b""
        objects[_check_id(oid)] = (meta, data)
    return present, objects
