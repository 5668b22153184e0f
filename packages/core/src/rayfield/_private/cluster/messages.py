"""Encode and decode the node-to-node messages of ``schema/cluster.fbs``.

Every ``decode_*`` raises :class:`MalformedMessage` for a payload that is not a valid
message of its type (truncated, out-of-range offsets, missing fields), never another
exception, so a service can answer ``INVALID_ARGUMENT`` and go on serving.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flatbuffers
import numpy as np

from rayfield.store.protocol.fb import (
    ForwardTaskReply,
    ForwardTaskRequest,
    HasObjectsReply,
    ObjectChunk,
    ObjectIdsRequest,
    PullObjectRequest,
    ResourceAmount,
    SubmitTaskRequest,
    UniqueID,
)

RESOURCE_UNIT = 10000  # fixed point of ResourceAmount.amount (as the native scheduler)
ID_SIZE = 20


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
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed payload
            raise MalformedMessage(f"{fn.__name__}: {type(exc).__name__}: {exc}") from None

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _id_vector(b: flatbuffers.Builder, start: Callable[..., Any], ids: Sequence[bytes]) -> int:
    start(b, len(ids))
    for oid in reversed(ids):
        UniqueID.CreateUniqueId(b, oid)
    return int(b.EndVector())


def _check_id(oid: bytes) -> bytes:
    if len(oid) != ID_SIZE:
        raise MalformedMessage(f"an id must be {ID_SIZE} bytes, got {len(oid)}")
    return oid


def _read_id(s: Any) -> bytes | None:
    return None if s is None else bytes(s.BytesAsNumpy().tobytes())


def _read_ids(n: int, get: Callable[[int], Any]) -> list[bytes]:
    return [_check_id(bytes(get(j).BytesAsNumpy().tobytes())) for j in range(n)]


def _finish(b: flatbuffers.Builder, root: int) -> bytes:
    b.Finish(root)
    return bytes(b.Output())


# ---- PullObject ----------------------------------------------------------------------


def encode_pull(object_id: bytes, timeout_ms: int) -> bytes:
    b = flatbuffers.Builder(64)
    PullObjectRequest.Start(b)
    PullObjectRequest.AddObjectId(b, UniqueID.CreateUniqueId(b, object_id))
    PullObjectRequest.AddTimeoutMs(b, timeout_ms)
    return _finish(b, PullObjectRequest.End(b))


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
    b = flatbuffers.Builder(len(data) + len(metadata) + 128)
    data_vec = b.CreateNumpyVector(np.frombuffer(data, dtype=np.uint8)) if len(data) else None
    meta_vec = b.CreateByteVector(metadata) if metadata else None
    ObjectChunk.Start(b)
    ObjectChunk.AddFound(b, found)
    ObjectChunk.AddDataSize(b, data_size)
    ObjectChunk.AddOffset(b, offset)
    if meta_vec is not None:
        ObjectChunk.AddMetadata(b, meta_vec)
    if data_vec is not None:
        ObjectChunk.AddData(b, data_vec)
    return _finish(b, ObjectChunk.End(b))


@_decoder
def decode_chunk(buf: bytes) -> tuple[bool, int, bytes, int, np.ndarray]:
    """``(found, data_size, metadata, offset, data)``; ``data`` is a view into ``buf``."""
    c = ObjectChunk.ObjectChunk.GetRootAs(buf, 0)
    meta = b"" if c.MetadataIsNone() else c.MetadataAsNumpy().tobytes()
    data = np.zeros(0, np.uint8) if c.DataIsNone() else c.DataAsNumpy()
    return bool(c.Found()), int(c.DataSize()), meta, int(c.Offset()), data


# ---- ForwardTask ---------------------------------------------------------------------


def encode_forward(origin: str, spec: dict[str, Any]) -> bytes:
    """Encode a task spec (the dict of ``NodeServer.take_task``) with the origin's address."""
    payload: bytes = spec["payload"]
    b = flatbuffers.Builder(len(payload) + 512)
    origin_off = b.CreateString(origin)
    payload_off = b.CreateByteVector(payload)
    res_offs = []
    for name, amount in spec.get("resources", {}).items():
        name_off = b.CreateString(name)
        ResourceAmount.Start(b)
        ResourceAmount.AddName(b, name_off)
        ResourceAmount.AddAmount(b, round(float(amount) * RESOURCE_UNIT))
        res_offs.append(ResourceAmount.End(b))
    SubmitTaskRequest.StartResourcesVector(b, len(res_offs))
    for off in reversed(res_offs):
        b.PrependUOffsetTRelative(off)
    resources = b.EndVector()
    deps = _id_vector(b, SubmitTaskRequest.StartDependenciesVector, spec.get("dependencies", []))
    rets = _id_vector(b, SubmitTaskRequest.StartReturnIdsVector, spec.get("return_ids", []))
    SubmitTaskRequest.Start(b)
    SubmitTaskRequest.AddTaskId(b, UniqueID.CreateUniqueId(b, spec["task_id"]))
    SubmitTaskRequest.AddResources(b, resources)
    SubmitTaskRequest.AddDependencies(b, deps)
    if spec.get("actor_id"):
        SubmitTaskRequest.AddActorId(b, UniqueID.CreateUniqueId(b, spec["actor_id"]))
    SubmitTaskRequest.AddActorCreation(b, bool(spec.get("actor_creation")))
    SubmitTaskRequest.AddMaxConcurrency(b, int(spec.get("max_concurrency", 1)))
    if spec.get("caller_id"):
        SubmitTaskRequest.AddCallerId(b, UniqueID.CreateUniqueId(b, spec["caller_id"]))
    SubmitTaskRequest.AddSequenceNo(b, int(spec.get("sequence_no", 0)))
    SubmitTaskRequest.AddPayload(b, payload_off)
    SubmitTaskRequest.AddReturnIds(b, rets)
    SubmitTaskRequest.AddMaxRetries(b, int(spec.get("max_retries", 0)))
    task = SubmitTaskRequest.End(b)
    ForwardTaskRequest.Start(b)
    ForwardTaskRequest.AddOrigin(b, origin_off)
    ForwardTaskRequest.AddTask(b, task)
    return _finish(b, ForwardTaskRequest.End(b))


@_decoder
def decode_forward(buf: bytes) -> tuple[str, dict[str, Any]]:
    """``(origin, spec)`` with the keys of ``StoreClient.submit_task``."""
    r = ForwardTaskRequest.ForwardTaskRequest.GetRootAs(buf, 0)
    t = r.Task()
    task_id = _read_id(t.TaskId()) if t is not None else None
    if t is None or task_id is None or r.Origin() is None:
        raise MalformedMessage("ForwardTaskRequest needs origin, task and task_id")
    resources = {}
    for j in range(t.ResourcesLength()):
        ra = t.Resources(j)
        resources[ra.Name().decode()] = ra.Amount() / RESOURCE_UNIT
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
    }
    return r.Origin().decode(), spec


def encode_forward_reply(accepted: bool, message: str = "") -> bytes:
    b = flatbuffers.Builder(64 + len(message))
    msg = b.CreateString(message)
    ForwardTaskReply.Start(b)
    ForwardTaskReply.AddAccepted(b, accepted)
    ForwardTaskReply.AddMessage(b, msg)
    return _finish(b, ForwardTaskReply.End(b))


@_decoder
def decode_forward_reply(buf: bytes) -> tuple[bool, str]:
    r = ForwardTaskReply.ForwardTaskReply.GetRootAs(buf, 0)
    return bool(r.Accepted()), (r.Message() or b"").decode()


# ---- HasObjects / ReleaseObjects -----------------------------------------------------


def encode_ids(ids: Sequence[bytes]) -> bytes:
    b = flatbuffers.Builder(32 + 24 * len(ids))
    vec = _id_vector(b, ObjectIdsRequest.StartObjectIdsVector, ids)
    ObjectIdsRequest.Start(b)
    ObjectIdsRequest.AddObjectIds(b, vec)
    return _finish(b, ObjectIdsRequest.End(b))


@_decoder
def decode_ids(buf: bytes) -> list[bytes]:
    r = ObjectIdsRequest.ObjectIdsRequest.GetRootAs(buf, 0)
    return _read_ids(r.ObjectIdsLength(), r.ObjectIds)


def encode_present(present: Sequence[bool]) -> bytes:
    b = flatbuffers.Builder(32 + len(present))
    HasObjectsReply.StartPresentVector(b, len(present))
    for p in reversed(present):
        b.PrependBool(p)
    vec = b.EndVector()
    HasObjectsReply.Start(b)
    HasObjectsReply.AddPresent(b, vec)
    return _finish(b, HasObjectsReply.End(b))


@_decoder
def decode_present(buf: bytes) -> list[bool]:
    r = HasObjectsReply.HasObjectsReply.GetRootAs(buf, 0)
    return [bool(r.Present(j)) for j in range(r.PresentLength())]
