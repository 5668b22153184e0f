"""Flatbuffers encoding of GCS messages (the one GCS module using the generated classes).

Each table of ``gcs.fbs`` that the service uses is described once in ``SPECS``
(field name -> kind); ``encode`` and ``decode`` walk that description and call
the generated builder functions and accessors by name, so a field missing from
the schema fails loudly. Nested tables listed in ``RECORDS`` decode to the typed
records of ``types.py``; other tables decode to dicts. Decoding never trusts
the buffer: sizes and vector lengths are checked and every exception is turned
into ``GcsInvalidRequestError``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import flatbuffers
from flatbuffers import encode as fb_encode
from flatbuffers import packer

from rayfield._private.protocol.constants import ID_SIZE, RESOURCE_UNIT
from rayfield._private.protocol.errors import GcsInvalidRequestError
from rayfield._private.protocol.types import ActorInfo, JobInfo, NodeInfo, ResourceDemand

__all__ = [
    "ID_SIZE",
    "METHODS",
    "RESOURCE_UNIT",
    "SERVICE",
    "SPECS",
    "decode",
    "decode_record",
    "encode",
    "id_vector",
    "offset_vector",
    "resource_vector",
]

_FB_PACKAGE = "rayfield.store.protocol.fb"

STR, BYTES, BOOL, INT, FLOAT, RES, IDS, STRS, BLOBS = (
    "str",
    "bytes",
    "bool",
    "int",
    "float",
    "resources",
    "ids",
    "strings",
    "blobs",
)


@dataclass(frozen=True)
class Table:
    """A nested table field (``many``: a vector of them)."""

    name: str
    many: bool = False


_DEMANDS = Table("GcsResourceDemand", many=True)
SPECS: dict[str, dict[str, Any]] = {
    "GcsEmpty": {},
    "GcsBlob": {"data": BYTES},
    "GcsResourceDemand": {"shape": RES, "count": INT, "infeasible": BOOL},
    "GcsNodeInfo": {
        "node_id": BYTES,
        "address": STR,
        "socket_path": STR,
        "session_dir": STR,
        "hostname": STR,
        "resources_total": RES,
        "resources_available": RES,
        "demand": _DEMANDS,
        "alive": BOOL,
        "last_heartbeat_s": FLOAT,
        "registered_s": FLOAT,
        "death_reason": STR,
    },
    "GcsActorInfo": {
        "actor_id": BYTES,
        "name": STR,
        "namespace": STR,
        "detached": BOOL,
        "owner_node_id": BYTES,
        "node_id": BYTES,
        "state": INT,
        "payload": BYTES,
    },
    "GcsJobInfo": {
        "job_id": BYTES,
        "driver_pid": INT,
        "node_id": BYTES,
        "entrypoint": STR,
        "start_time_s": FLOAT,
        "end_time_s": FLOAT,
        "finished": BOOL,
    },
    "GcsRegisterNodeRequest": {"node": Table("GcsNodeInfo")},
    "GcsHeartbeatRequest": {"node_id": BYTES, "resources_available": RES, "demand": _DEMANDS},
    "GcsHeartbeatReply": {"reregister": BOOL},
    "GcsGetNodesReply": {"nodes": Table("GcsNodeInfo", many=True)},
    "GcsUnregisterNodeRequest": {"node_id": BYTES},
    "GcsKvPutRequest": {"namespace": STR, "key": BYTES, "value": BYTES, "overwrite": BOOL},
    "GcsKvPutReply": {"added": BOOL},
    "GcsKvKeyRequest": {"namespace": STR, "key": BYTES},
    "GcsKvGetReply": {"found": BOOL, "value": BYTES},
    "GcsKvDelReply": {"deleted": BOOL},
    "GcsKvKeysRequest": {"namespace": STR, "prefix": BYTES},
    "GcsKvKeysReply": {"keys": BLOBS},
    "GcsRegisterActorRequest": {"actor": Table("GcsActorInfo")},
    "GcsUpdateActorRequest": {"actor_id": BYTES, "state": INT, "node_id": BYTES},
    "GcsGetActorRequest": {"actor_id": BYTES, "name": STR, "namespace": STR},
    "GcsGetActorReply": {"found": BOOL, "actor": Table("GcsActorInfo")},
    "GcsListActorsReply": {"actors": Table("GcsActorInfo", many=True)},
    "GcsObjectLocationsRequest": {"node_id": BYTES, "object_ids": IDS},
    "GcsGetObjectLocationsRequest": {"object_ids": IDS},
    "GcsObjectLocations": {"object_id": BYTES, "node_ids": BLOBS},
    "GcsGetObjectLocationsReply": {"locations": Table("GcsObjectLocations", many=True)},
    "GcsAddJobRequest": {"job": Table("GcsJobInfo")},
    "GcsMarkJobFinishedRequest": {"job_id": BYTES},
    "GcsListJobsReply": {"jobs": Table("GcsJobInfo", many=True)},
    "GcsAddTaskEventsRequest": {"events": BLOBS},
    "GcsGetTaskEventsRequest": {"limit": INT},
    "GcsGetTaskEventsReply": {"events": BLOBS, "dropped": INT},
    "GcsPubSubMessage": {"channel": STR, "key": BYTES, "payload": BYTES},
    "GcsSubscribeRequest": {"channels": STRS},
    # Node introspection (cluster.fbs), served by each node's /rayfield.Node service.
    "NodeIntrospectRequest": {"objects": BOOL, "max_objects": INT},
    "WorkerState": {
        "pid": INT,
        "state": STR,
        "cpu_percent": FLOAT,
        "rss_bytes": INT,
        "started_s": FLOAT,
    },
    "RunningTask": {"task_id": BYTES, "pid": INT, "actor_task": BOOL},
    "StoredObject": {
        "object_id": BYTES,
        "data_size": INT,
        "metadata_size": INT,
        "sealed": BOOL,
        "ref_count": INT,
        "pin_count": INT,
        "buffer_count": INT,
        "owner_pid": INT,
        "spilled": BOOL,
        "create_time_ms": INT,
    },
    "NodeIntrospectReply": {
        "node_id": BYTES,
        "address": STR,
        "hostname": STR,
        "session_dir": STR,
        "cpu_percent": FLOAT,
        "memory_used": INT,
        "memory_total": INT,
        "store_capacity": INT,
        "store_used": INT,
        "num_objects": INT,
        "num_spilled": INT,
        "spilled_bytes": INT,
        "resources_total": RES,
        "resources_available": RES,
        "tasks_queued": INT,
        "tasks_waiting": INT,
        "tasks_infeasible": INT,
        "actor_tasks_queued": INT,
        "workers": Table("WorkerState", many=True),
        "running": Table("RunningTask", many=True),
        "objects": Table("StoredObject", many=True),
    },
    "LogFile": {"name": STR, "size": INT, "mtime_s": FLOAT},
    "ListLogsReply": {"files": Table("LogFile", many=True)},
    "ReadLogRequest": {"name": STR, "offset": INT, "max_bytes": INT},
    "ReadLogReply": {"found": BOOL, "size": INT, "offset": INT, "data": BYTES},
    "RemoteKillActorRequest": {"actor_id": BYTES, "no_restart": BOOL},
    "RemoteKillActorReply": {"killed": BOOL, "message": STR},
    "RemoteCancelTaskRequest": {
        "task_id": BYTES,
        "force": BOOL,
        "hops": INT,
        "recursive": BOOL,
    },
    "RemoteCancelTaskReply": {"state": STR},
    "CancelJobRequest": {"job_id": BYTES},
    "CancelJobReply": {"cancelled": INT},
}

RECORDS: dict[str, Callable[..., Any]] = {
    "GcsResourceDemand": ResourceDemand,
    "GcsNodeInfo": NodeInfo,
    "GcsActorInfo": ActorInfo,
    "GcsJobInfo": JobInfo,
}


@cache
def _module(table: str) -> ModuleType:
    return importlib.import_module(f"{_FB_PACKAGE}.{table}")


@cache
def _camel(field: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field.split("_"))


def _get(values: Any, field: str) -> Any:
    if isinstance(values, dict):
        return values.get(field)
    return getattr(values, field, None)


# ---- encoding -----------------------------------------------------------------


def offset_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    """A vector of the tables (or strings) at ``offsets``, in order."""
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return int(b.EndVector())


def id_vector(b: flatbuffers.Builder, ids: Sequence[bytes]) -> int:
    """A vector of UniqueID structs, written as one block (ids are ID_SIZE bytes, alignment
    1): struct by struct, the builder takes about 20 us an id, a thousand ids 20 ms.

    Raises:
        GcsInvalidRequestError: when an id is not ID_SIZE bytes.
    """
    for oid in ids:
        if len(oid) != ID_SIZE:
            raise GcsInvalidRequestError(
                f"object ids are {ID_SIZE} bytes, got {len(oid)}: {bytes(oid)[:32]!r}"
            )
    data = b"".join(bytes(oid) for oid in ids)
    b.StartVector(ID_SIZE, len(ids), 1)
    b.head = b.head - len(data)
    b.Bytes[b.head : b.head + len(data)] = data
    return int(b.EndVector())


def resource_vector(b: flatbuffers.Builder, amounts: dict[str, float]) -> int:
    """A vector of ResourceAmount tables: each amount in units of 1/RESOURCE_UNIT."""
    mod = _module("ResourceAmount")
    offsets = []
    for name, amount in amounts.items():
        name_off = b.CreateString(name)
        mod.Start(b)
        mod.AddName(b, name_off)
        mod.AddAmount(b, round(float(amount) * RESOURCE_UNIT))
        offsets.append(mod.End(b))
    return offset_vector(b, offsets)


def _build(b: flatbuffers.Builder, table: str, values: Any) -> int:
    spec = SPECS[table]
    offsets: dict[str, int] = {}
    for field, kind in spec.items():
        value = _get(values, field)
        if value is None or kind in (BOOL, INT, FLOAT):
            continue
        if kind == STR:
            offsets[field] = b.CreateString(value)
        elif kind == BYTES:
            offsets[field] = b.CreateByteVector(bytes(value))
        elif kind == RES:
            offsets[field] = resource_vector(b, value)
        elif kind == IDS:
            offsets[field] = id_vector(b, list(value))
        elif kind == STRS:
            offsets[field] = offset_vector(b, [b.CreateString(s) for s in value])
        elif kind == BLOBS:
            blobs = [_build(b, "GcsBlob", {"data": bytes(x)}) for x in value]
            offsets[field] = offset_vector(b, blobs)
        elif isinstance(kind, Table) and kind.many:
            offsets[field] = offset_vector(b, [_build(b, kind.name, x) for x in value])
        elif isinstance(kind, Table):
            offsets[field] = _build(b, kind.name, value)
    mod = _module(table)
    mod.Start(b)
    for field, kind in spec.items():
        add = getattr(mod, "Add" + _camel(field))
        if field in offsets:
            add(b, offsets[field])
        elif kind in (BOOL, INT, FLOAT) and (value := _get(values, field)) is not None:
            add(b, {BOOL: bool, INT: int, FLOAT: float}[kind](value))
    return int(mod.End(b))


def encode(table: str, values: Any = None) -> bytes:
    """Encode ``values`` (a dict or a record) as a flatbuffer rooted at ``table``.

    Raises:
        GcsInvalidRequestError: when an object id is not 20 bytes.
        KeyError: when ``table`` is not described in SPECS.
    """
    b = flatbuffers.Builder(256)
    b.Finish(_build(b, table, values if values is not None else {}))
    return bytes(b.Output())


# ---- decoding -----------------------------------------------------------------


def _str(raw: Any) -> str:
    if raw is None:
        return ""
    return raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else str(raw)


def _bytes(arr: Any) -> bytes:
    return b"" if isinstance(arr, int) else bytes(arr.tobytes())


def _length(obj: Any, name: str) -> int:
    n = int(getattr(obj, name + "Length")())
    if n < 0 or n > len(obj._tab.Bytes):
        raise ValueError(
            f"vector {name} claims {n} elements in a {len(obj._tab.Bytes)}-byte buffer"
        )
    return n


def _element(obj: Any, name: str, j: int) -> Any:
    item = getattr(obj, name)(j)
    if item is None:
        raise ValueError(f"element {j} of {name} is missing")
    return item


def _read_field(obj: Any, field: str, kind: Any) -> Any:
    name = _camel(field)
    if kind == STR:
        return _str(getattr(obj, name)())
    if kind == BYTES:
        return _bytes(getattr(obj, name + "AsNumpy")())
    if kind in (BOOL, INT, FLOAT):
        return {BOOL: bool, INT: int, FLOAT: float}[kind](getattr(obj, name)())
    n = _length(obj, name)
    if kind == RES:
        out = {}
        for j in range(n):
            item = _element(obj, name, j)
            out[_str(item.Name())] = int(item.Amount()) / RESOURCE_UNIT
        return out
    if kind == IDS:
        if n == 0:
            return []
        start = _element(obj, name, 0)._tab.Pos
        raw = bytes(obj._tab.Bytes[start : start + ID_SIZE * n])
        if len(raw) != ID_SIZE * n:
            raise ValueError(f"vector {name} runs past the end of the buffer")
        return [raw[i : i + ID_SIZE] for i in range(0, len(raw), ID_SIZE)]
    if kind == STRS:
        return [_str(_element(obj, name, j)) for j in range(n)]
    if kind == BLOBS:
        return [_bytes(_element(obj, name, j).DataAsNumpy()) for j in range(n)]
    assert isinstance(kind, Table)
    return [_read(kind.name, _element(obj, name, j)) for j in range(n)]


def _read(table: str, obj: Any) -> Any:
    out = {}
    for field, kind in SPECS[table].items():
        if isinstance(kind, Table) and not kind.many:
            sub = getattr(obj, _camel(field))()
            out[field] = None if sub is None else _read(kind.name, sub)
        else:
            out[field] = _read_field(obj, field, kind)
    record = RECORDS.get(table)
    return record(**out) if record is not None else out


def _root(table: str, buf: bytes) -> Any:
    if len(buf) < 12:
        raise ValueError(f"{len(buf)} bytes is too short for a flatbuffer")
    root = fb_encode.Get(packer.uoffset, buf, 0)
    if root + 4 > len(buf):
        raise ValueError("root offset points past the end of the buffer")
    vtable = root - fb_encode.Get(packer.soffset, buf, root)
    if vtable < 0 or vtable + 4 > len(buf):
        raise ValueError("vtable offset points outside the buffer")
    cls = getattr(_module(table), table)
    return cls.GetRootAs(buf, 0)


def decode(table: str, buf: bytes) -> dict[str, Any]:
    """Decode a flatbuffer rooted at ``table`` into a dict of its fields.

    Raises:
        GcsInvalidRequestError: when the buffer is malformed in any way.
    """
    try:
        out = _read(table, _root(table, bytes(buf)))
    except Exception as exc:
        raise GcsInvalidRequestError(f"malformed {table} payload: {exc}") from None
    return out if isinstance(out, dict) else vars(out)


def decode_record(table: str, buf: bytes) -> Any:
    """Decode a flatbuffer rooted at a record table (GcsNodeInfo, ...) into its record.

    Raises:
        GcsInvalidRequestError: when the buffer is malformed in any way.
    """
    try:
        return _read(table, _root(table, bytes(buf)))
    except Exception as exc:
        raise GcsInvalidRequestError(f"malformed {table} payload: {exc}") from None


SERVICE = "rayfield.Gcs"
"""gRPC service name: methods are called as ``/rayfield.Gcs/<Method>``."""

METHODS: dict[str, tuple[str, str]] = {
    "RegisterNode": ("GcsRegisterNodeRequest", "GcsEmpty"),
    "Heartbeat": ("GcsHeartbeatRequest", "GcsHeartbeatReply"),
    "GetNodes": ("GcsEmpty", "GcsGetNodesReply"),
    "UnregisterNode": ("GcsUnregisterNodeRequest", "GcsEmpty"),
    "KvPut": ("GcsKvPutRequest", "GcsKvPutReply"),
    "KvGet": ("GcsKvKeyRequest", "GcsKvGetReply"),
    "KvDel": ("GcsKvKeyRequest", "GcsKvDelReply"),
    "KvKeys": ("GcsKvKeysRequest", "GcsKvKeysReply"),
    "RegisterActor": ("GcsRegisterActorRequest", "GcsEmpty"),
    "UpdateActor": ("GcsUpdateActorRequest", "GcsEmpty"),
    "GetActor": ("GcsGetActorRequest", "GcsGetActorReply"),
    "ListActors": ("GcsEmpty", "GcsListActorsReply"),
    "AddObjectLocations": ("GcsObjectLocationsRequest", "GcsEmpty"),
    "RemoveObjectLocations": ("GcsObjectLocationsRequest", "GcsEmpty"),
    "GetObjectLocations": ("GcsGetObjectLocationsRequest", "GcsGetObjectLocationsReply"),
    "AddJob": ("GcsAddJobRequest", "GcsEmpty"),
    "MarkJobFinished": ("GcsMarkJobFinishedRequest", "GcsEmpty"),
    "ListJobs": ("GcsEmpty", "GcsListJobsReply"),
    "AddTaskEvents": ("GcsAddTaskEventsRequest", "GcsEmpty"),
    "GetTaskEvents": ("GcsGetTaskEventsRequest", "GcsGetTaskEventsReply"),
    "Publish": ("GcsPubSubMessage", "GcsEmpty"),
    "Subscribe": ("GcsSubscribeRequest", "GcsPubSubMessage"),
}
"""Method name -> (request table, reply table). Subscribe streams its replies."""
STREAMING_METHODS = frozenset({"Subscribe"})
