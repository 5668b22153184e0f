"""Encode and decode the node-to-node messages of ``schema/cluster.fbs``.

The hot messages between nodes (tasks forwarded, objects fetched, pushed and pulled).
Their tables are described in ``codec.SPECS`` and written by ``codec.encode``, the one
encoder of the cluster's messages; the functions here give each message its Python
shape (tuples in, tuples out) and frame the two that carry raw object bytes after
their table (``ObjectChunk``, ``PushObjectRequest``: a 4-byte little-endian table
length, the table, then the bytes). The node's other messages (introspection, logs,
kill, cancel) are encoded with ``codec.encode`` directly.

Every ``decode_*`` raises :class:`MalformedMessage` for a payload that is not a valid
message of its type (truncated, out-of-range offsets, missing fields), never another
exception, so a service can answer ``INVALID_ARGUMENT`` and go on serving.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rayfield._private.protocol import codec, task_wire
from rayfield._private.protocol.constants import ID_SIZE, RESOURCE_UNIT
from rayfield._private.protocol.errors import GcsInvalidRequestError

__all__ = [
    "ID_SIZE",
    "RESOURCE_UNIT",
    "MalformedMessage",
    "decode_chunk",
    "decode_fetch",
    "decode_fetch_reply",
    "decode_forward_batch",
    "decode_forward_batch_reply",
    "decode_ids",
    "decode_present",
    "decode_pull",
    "decode_push",
    "encode_chunk",
    "encode_fetch",
    "encode_fetch_reply",
    "encode_forward_batch",
    "encode_forward_batch_reply",
    "encode_ids",
    "encode_present",
    "encode_pull",
    "encode_push",
]


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


def _check_id(oid: bytes | None, what: str) -> bytes:
    if oid is None:
        raise MalformedMessage(f"{what} is missing")
    if len(oid) != ID_SIZE:
        raise MalformedMessage(f"an id must be {ID_SIZE} bytes, got {len(oid)}")
    return oid


def _encode(table: str, values: dict[str, Any]) -> bytes:
    try:
        return codec.encode(table, values)
    except GcsInvalidRequestError as exc:  # a ValueError: a bad id from this process
        raise ValueError(str(exc)) from None


def _framed(table: bytes, data: Any) -> bytes:
    return b"".join((len(table).to_bytes(4, "little"), table, data))


def _unframe(buf: bytes, what: str) -> tuple[bytes, int]:
    n = int.from_bytes(buf[:4], "little")
    if n > len(buf) - 4:
        raise MalformedMessage(f"{what} table of {n} bytes in a message of {len(buf)}")
    return bytes(buf[4 : 4 + n]), 4 + n


# ---- PullObject ----------------------------------------------------------------------


def encode_pull(object_id: bytes, timeout_ms: int) -> bytes:
    return _encode("PullObjectRequest", {"object_id": object_id, "timeout_ms": timeout_ms})


@_decoder
def decode_pull(buf: bytes) -> tuple[bytes, int]:
    """``(object_id, timeout_ms)``."""
    r = codec.decode("PullObjectRequest", buf)
    return _check_id(r["object_id"], "PullObjectRequest's object_id"), r["timeout_ms"]


def encode_chunk(
    found: bool, data_size: int = 0, metadata: bytes = b"", offset: int = 0, data: Any = b""
) -> bytes:
    """A chunk message: length-prefixed ObjectChunk table, then ``data`` raw."""
    values = {
        "found": found,
        "data_size": data_size,
        "offset": offset,
        "metadata": metadata or None,
    }
    return _framed(_encode("ObjectChunk", values), data)


@_decoder
def decode_chunk(buf: bytes) -> tuple[bool, int, bytes, int, memoryview]:
    """``(found, data_size, metadata, offset, data)``; ``data`` is a view into ``buf``."""
    table, end = _unframe(buf, "chunk")
    c = codec.decode("ObjectChunk", table)
    return c["found"], c["data_size"], c["metadata"], c["offset"], memoryview(buf)[end:]


# ---- ForwardTasks --------------------------------------------------------------------


def encode_forward_batch(
    origin: str, tasks: Sequence[tuple[dict[str, Any], Sequence[bytes]]], in_order: bool = False
) -> bytes:
    """Tasks forwarded by ``origin`` in one message: ``(spec, pushed)`` each, ``spec`` the
    dict of ``NodeServer.take_task`` and ``pushed`` the arguments the origin will push;
    ``in_order``: refuse the rest once one is refused."""
    return task_wire.write_forward_batch(origin, tasks, in_order)


def _read_forward(t: dict[str, Any]) -> tuple[str, dict[str, Any], list[bytes]]:
    task = t["task"]
    if task is None or not t["origin"]:
        raise MalformedMessage("ForwardTaskRequest needs origin, task and task_id")
    task["task_id"] = _check_id(task["task_id"], "ForwardTaskRequest's task_id")
    if task["resources"] is None or "" in task["resources"]:
        raise MalformedMessage("a resource amount without a name")
    return t["origin"], task, t["pushed"]


@_decoder
def decode_forward_batch(buf: bytes) -> tuple[list[tuple[str, dict[str, Any], list[bytes]]], bool]:
    """``([(origin, spec, pushed), ...], in_order)``: ``spec`` with the keys of
    ``StoreClient.submit_task``, ``pushed`` the arguments the origin will push."""
    tasks, in_order = task_wire.read_forward_batch(bytes(buf))
    return [_read_forward(t) for t in tasks], in_order


def encode_forward_batch_reply(replies: Sequence[str | None]) -> bytes:
    """One reply a task, in order: None when accepted, else why it was refused."""
    return task_wire.write_forward_replies(replies)


@_decoder
def decode_forward_batch_reply(buf: bytes) -> list[str | None]:
    return task_wire.read_forward_replies(bytes(buf))


# ---- PushObject ----------------------------------------------------------------------


def encode_push(
    object_id: bytes, sender: str, data_size: int, metadata: bytes = b"", data: Any = None
) -> bytes:
    """A push from the node at ``sender``: length-prefixed PushObjectRequest, then ``data``
    raw when given (the whole object inline); without ``data`` it only says the sender
    holds the object (to be pulled)."""
    values = {
        "object_id": object_id,
        "sender": sender,
        "data_size": data_size,
        "metadata": metadata or None,
        "data_inline": data is not None,
    }
    return _framed(_encode("PushObjectRequest", values), b"" if data is None else data)


@_decoder
def decode_push(buf: bytes) -> tuple[bytes, str, int, bytes, memoryview | None]:
    """``(object_id, sender, data_size, metadata, data)``; ``data`` (a view into ``buf``)
    is None when the object did not come inline.

    Raises:
        MalformedMessage: also when inline data is not exactly ``data_size`` bytes.
    """
    table, end = _unframe(buf, "push")
    r = codec.decode("PushObjectRequest", table)
    if r["object_id"] is None or not r["sender"]:
        raise MalformedMessage("PushObjectRequest needs object_id and sender")
    oid, size = _check_id(r["object_id"], "object_id"), r["data_size"]
    if not r["data_inline"]:
        return oid, r["sender"], size, r["metadata"], None
    data = memoryview(buf)[end:]
    if len(data) != size:
        raise MalformedMessage(f"push of {size} bytes carries {len(data)}")
    return oid, r["sender"], size, r["metadata"], data


# ---- HasObjects / ReleaseObjects -----------------------------------------------------


def encode_ids(ids: Sequence[bytes], wait_ms: int = 0) -> bytes:
    return _encode("ObjectIdsRequest", {"object_ids": ids, "wait_ms": wait_ms})


@_decoder
def decode_ids(buf: bytes) -> tuple[list[bytes], int]:
    """``(object_ids, wait_ms)``."""
    r = codec.decode("ObjectIdsRequest", buf)
    return r["object_ids"], r["wait_ms"]


def encode_present(present: Sequence[bool]) -> bytes:
    return _encode("HasObjectsReply", {"present": present})


@_decoder
def decode_present(buf: bytes) -> list[bool]:
    return list(codec.decode("HasObjectsReply", buf)["present"])


# ---- FetchObjects --------------------------------------------------------------------


def encode_fetch(ids: Sequence[bytes], wait_ms: int, inline_max_bytes: int) -> bytes:
    values = {"object_ids": ids, "wait_ms": wait_ms, "inline_max_bytes": inline_max_bytes}
    return _encode("FetchObjectsRequest", values)


@_decoder
def decode_fetch(buf: bytes) -> tuple[list[bytes], int, int]:
    """``(object_ids, wait_ms, inline_max_bytes)``."""
    r = codec.decode("FetchObjectsRequest", buf)
    return r["object_ids"], r["wait_ms"], r["inline_max_bytes"]


def encode_fetch_reply(
    present: Sequence[bool], objects: Sequence[tuple[bytes, bytes, bytes]]
) -> bytes:
    """``present``: a flag a requested id; ``objects``: ``(object_id, metadata, data)`` of
    those sent whole."""
    return task_wire.write_fetch_reply(present, objects)


@_decoder
def decode_fetch_reply(buf: bytes) -> tuple[list[bool], dict[bytes, tuple[bytes, bytes]]]:
    """``(present, {object_id: (metadata, data)})``."""
    present, rows = task_wire.read_fetch_reply(bytes(buf))
    objects = {
        _check_id(oid, "a FetchedObject's object_id"): (meta, data) for oid, meta, data in rows
    }
    return present, objects
