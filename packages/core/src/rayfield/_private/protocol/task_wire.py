"""The hot cluster messages (``schema/cluster.fbs``) written and read with ``struct``:
``ForwardBatchRequest`` (tasks forwarded) with its ``ForwardBatchReply``, and
``FetchObjectsReply`` (results sent back); and a vector of ``GcsBlob`` tables (task
events), as a block the codec's builder copies in (:func:`blob_vector_block`).

Tasks a node forwards to another travel as a ``ForwardBatchRequest``: a vector of
``ForwardTaskRequest`` tables, each holding a ``SubmitTaskRequest``. The declarative codec
(``codec.py``) goes through the generated flatbuffers classes a field at a time, about
170 us to write and 190 us to read one task on this machine: more than the rest of a
forward. This module writes and reads the same bytes directly (tens of microseconds a
task); the codec still reads what it writes and the other way round (the unit tests check
both).

Layout written (any valid layout is a flatbuffer): front to back, each table right after
its vtable, the children of a table after it, so every ``uoffset`` points forward. A
table's 8-byte scalars sit 8-aligned, vector lengths and offsets 4-aligned. Scalars equal
to their schema default are left out, as flatbuffers' builder does.

Reading checks every offset and length against the buffer; anything out of place raises
:class:`ValueError` (``messages.decode_forward_batch`` turns it into ``MalformedMessage``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from rayfield._private.protocol.constants import ID_SIZE, RESOURCE_UNIT

__all__ = [
    "blob_vector_block",
    "read_fetch_reply",
    "read_forward_batch",
    "read_forward_replies",
    "write_fetch_reply",
    "write_forward_batch",
    "write_forward_replies",
]

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_U16_2 = struct.Struct("<HH")

# SubmitTaskRequest's fields, in the schema's order (their vtable slots).
_TASK_ID, _RESOURCES, _DEPENDENCIES, _ACTOR_ID, _ACTOR_CREATION = 0, 1, 2, 3, 4
_MAX_CONCURRENCY, _CALLER_ID, _SEQUENCE_NO, _PAYLOAD, _RETURN_IDS = 5, 6, 7, 8, 9
_MAX_RETRIES, _ACTOR_HANDLES, _RUNTIME_ENV = 10, 15, 17
_TASK_FIELDS = 18
# Scalars read from a SubmitTaskRequest: (slot, size).
_TASK_SCALARS = ((_ACTOR_CREATION, 1), (_MAX_CONCURRENCY, 4), (_SEQUENCE_NO, 8), (_MAX_RETRIES, 4))


class _Writer:
    """A flatbuffer written front to back into one bytearray."""

    def __init__(self) -> None:
        self.buf = bytearray(4)  # the root offset, set by finish

    def align(self, n: int) -> None:
        pad = -len(self.buf) % n
        if pad:
            self.buf += bytes(pad)

    def table(self, fields: list[tuple[int, int, bytes]]) -> tuple[int, dict[int, int]]:
        """Write a vtable and its table; ``fields`` are ``(slot, alignment, bytes)``, those
        of alignment 8 first, then 4, then 1. Returns the table's position and each
        slot's position."""
        wide = bool(fields) and fields[0][1] == 8
        inline = 8 if wide else 4
        used = 0
        where = {}
        for slot, _align, data in fields:
            where[slot] = inline
            inline += len(data)
            if slot >= used:
                used = slot + 1
        vsize = 4 + 2 * used
        slots = [0] * used
        for slot, off in where.items():
            slots[slot] = off
        # The table starts 8-aligned, right after its vtable (padding before the vtable).
        buf = self.buf
        pad = -(len(buf) + vsize) % 8
        if pad:
            buf += bytes(pad)
        buf += struct.pack(f"<{used + 2}H", vsize, inline, *slots)
        pos = len(buf)
        buf += _I32.pack(vsize)  # table - vtable
        if wide:
            buf += bytes(4)
        for _slot, _align, data in fields:
            buf += data
        return pos, {slot: pos + off for slot, off in where.items()}

    def patch(self, at: int, target: int) -> None:
        """Point the uoffset at ``at`` to ``target`` (after it)."""
        _U32.pack_into(self.buf, at, target - at)

    def vector(self, count: int, data: bytes) -> int:
        """Write a vector (its length, then ``data``, elements of at most 4-byte
        alignment); its position."""
        self.align(4)
        pos = len(self.buf)
        self.buf += _U32.pack(count)
        self.buf += data
        return pos

    def string(self, s: str) -> int:
        raw = s.encode()
        pos = self.vector(len(raw), raw)
        self.buf += b"\0"
        return pos

    def ids(self, ids: Sequence[bytes]) -> int:
        for oid in ids:
            if len(oid) != ID_SIZE:
                raise ValueError(f"an id must be {ID_SIZE} bytes, got {len(oid)}")
        return self.vector(len(ids), b"".join(ids))


_PTR = bytes(4)  # a uoffset to patch


def _id_field(slot: int, oid: bytes) -> tuple[int, int, bytes]:
    if len(oid) != ID_SIZE:
        raise ValueError(f"an id must be {ID_SIZE} bytes, got {len(oid)}")
    return (slot, 1, bytes(oid))


def _write_task(w: _Writer, spec: Mapping[str, Any]) -> int:
    """Write ``spec`` (the dict form of ``TaskSpec.to_native``) as a SubmitTaskRequest;
    its table's position."""
    children: list[tuple[int, str, Any]] = [(_PAYLOAD, "bytes", spec["payload"])]
    resources = spec.get("resources")
    if resources:
        children.append((_RESOURCES, "res", resources))
    for slot, key in (
        (_DEPENDENCIES, "dependencies"),
        (_RETURN_IDS, "return_ids"),
        (_ACTOR_HANDLES, "actor_handles"),
    ):
        ids = spec.get(key)
        if ids:
            children.append((slot, "ids", ids))
    if spec.get("runtime_env"):
        children.append((_RUNTIME_ENV, "str", spec["runtime_env"]))
    fields: list[tuple[int, int, bytes]] = []
    sequence = int(spec.get("sequence_no", 0))
    if sequence:
        fields.append((_SEQUENCE_NO, 8, _U64.pack(sequence)))
    concurrency = int(spec.get("max_concurrency", 1))
    if concurrency != 1:
        fields.append((_MAX_CONCURRENCY, 4, _U32.pack(concurrency)))
    retries = int(spec.get("max_retries", 0))
    if retries:
        fields.append((_MAX_RETRIES, 4, _I32.pack(retries)))
    fields.extend((slot, 4, _PTR) for slot, _, _ in children)
    fields.append(_id_field(_TASK_ID, spec["task_id"]))
    if spec.get("actor_id"):
        fields.append(_id_field(_ACTOR_ID, spec["actor_id"]))
    if spec.get("caller_id"):
        fields.append(_id_field(_CALLER_ID, spec["caller_id"]))
    if spec.get("actor_creation"):
        fields.append((_ACTOR_CREATION, 1, b"\x01"))
    _pos, at = w.table(fields)
    for slot, kind, value in children:
        if kind == "bytes":
            target = w.vector(len(value), bytes(value))
        elif kind == "ids":
            target = w.ids(value)
        elif kind == "str":
            target = w.string(value)
        else:
            target = _write_resources(w, value)
        w.patch(at[slot], target)
    return _pos


def _write_resources(w: _Writer, amounts: Mapping[str, float]) -> int:
    """A vector of ResourceAmount tables (name, amount in 1/RESOURCE_UNIT). Its bytes hold
    only offsets relative to themselves, so one block written at an 8-aligned position is
    kept for each set of amounts and copied."""
    key = tuple(amounts.items())
    block = _RESOURCE_BLOCKS.get(key)
    if block is None:
        sub = _Writer()
        sub.buf = bytearray()
        vec = sub.vector(len(amounts), _PTR * len(amounts))
        for i, (name, amount) in enumerate(amounts.items()):
            units = round(float(amount) * RESOURCE_UNIT)
            fields = ([(1, 8, _I64.pack(units))] if units else []) + [(0, 4, _PTR)]
            pos, at = sub.table(fields)
            sub.patch(vec + 4 + 4 * i, pos)
            sub.patch(at[0], sub.string(name))
        block = bytes(sub.buf)
        if len(_RESOURCE_BLOCKS) < 1024:
            _RESOURCE_BLOCKS[key] = block
    w.align(8)
    pos = len(w.buf)
    w.buf += block
    return pos


_RESOURCE_BLOCKS: dict[tuple[tuple[str, float], ...], bytes] = {}


def write_forward_batch(
    origin: str, tasks: Sequence[tuple[Mapping[str, Any], Sequence[bytes]]], in_order: bool
) -> bytes:
    """A ForwardBatchRequest: ``(spec, pushed)`` each, every task from ``origin``.

    Raises:
        ValueError: an id is not ID_SIZE bytes.
    """
    w = _Writer()
    fields = [(0, 4, _PTR)]
    if in_order:
        fields.append((1, 1, b"\x01"))
    root, at = w.table(fields)
    w.patch(0, root)
    vec = w.vector(len(tasks), _PTR * len(tasks))
    w.patch(at[0], vec)
    origin_slots = []
    for i, (spec, pushed) in enumerate(tasks):
        slots = [(0, 4, _PTR), (1, 4, _PTR)] + ([(2, 4, _PTR)] if pushed else [])
        pos, tat = w.table(slots)
        w.patch(vec + 4 + 4 * i, pos)
        origin_slots.append(tat[0])
        if pushed:
            w.patch(tat[2], w.ids(pushed))
        w.patch(tat[1], _write_task(w, spec))
    if origin_slots:  # one string for every task (a shared string), after them all
        origin_at = w.string(origin)
        for slot in origin_slots:
            w.patch(slot, origin_at)
    return bytes(w.buf)


# ---- reading --------------------------------------------------------------------------


class _Reader:
    """Bounds-checked reads of a flatbuffer."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.n = len(buf)

    def check(self, pos: int, size: int) -> None:
        if pos < 0 or pos + size > self.n:
            raise ValueError(f"{size} bytes at {pos} run outside a {self.n}-byte buffer")

    def u32(self, pos: int) -> int:
        self.check(pos, 4)
        return int(_U32.unpack_from(self.buf, pos)[0])

    def deref(self, pos: int) -> int:
        return pos + self.u32(pos)

    def table(self, pos: int, nslots: int) -> list[int]:
        """The position of each of the first ``nslots`` fields of the table at ``pos``
        (0: absent)."""
        buf, n = self.buf, self.n
        if pos < 0 or pos + 4 > n:
            raise ValueError(f"a table at {pos} of a {n}-byte buffer")
        vt = pos - _I32.unpack_from(buf, pos)[0]
        if vt < 0 or vt + 4 > n:
            raise ValueError(f"a vtable at {vt} of a {n}-byte buffer")
        vsize, tsize = _U16_2.unpack_from(buf, vt)
        if vsize < 4 or vsize % 2 or vt + vsize > n or pos + tsize > n:
            raise ValueError(f"a vtable of {vsize} bytes for a {tsize}-byte table at {pos}")
        count = min((vsize - 4) // 2, nslots)
        offs = struct.unpack_from(f"<{count}H", buf, vt + 4)
        out = [0] * nslots
        for i, off in enumerate(offs):
            if off:
                if off + 1 > tsize:
                    raise ValueError(f"a field at {off} of a {tsize}-byte table")
                out[i] = pos + off
        return out

    def vector(self, pos: int, elem: int) -> tuple[int, int]:
        """``(count, start)`` of the vector the uoffset at ``pos`` points to."""
        vec = self.deref(pos)
        count = self.u32(vec)
        self.check(vec + 4, count * elem)
        return count, vec + 4

    def blob(self, pos: int) -> bytes:
        count, start = self.vector(pos, 1)
        return bytes(self.buf[start : start + count])

    def string(self, pos: int) -> str:
        return self.blob(pos).decode("utf-8")

    def ids(self, pos: int) -> list[bytes]:
        count, start = self.vector(pos, ID_SIZE)
        raw = self.buf[start : start + count * ID_SIZE]
        return [bytes(raw[i : i + ID_SIZE]) for i in range(0, len(raw), ID_SIZE)]

    def id(self, pos: int) -> bytes:
        self.check(pos, ID_SIZE)
        return bytes(self.buf[pos : pos + ID_SIZE])

    def offsets(self, pos: int) -> list[int]:
        """The positions the elements of a vector of tables point to."""
        count, start = self.vector(pos, 4)
        return [self.deref(start + 4 * i) for i in range(count)]


def _read_task(r: _Reader, pos: int) -> dict[str, Any]:
    """A SubmitTaskRequest as the codec reads it (the fields a forward carries)."""
    f = r.table(pos, _TASK_FIELDS)
    buf = r.buf
    resources: dict[str, float] = {}
    if f[_RESOURCES]:
        for item in r.offsets(f[_RESOURCES]):
            name_at, amount_at = r.table(item, 2)
            name = r.string(name_at) if name_at else ""
            amount = 0
            if amount_at:
                r.check(amount_at, 8)
                amount = _I64.unpack_from(buf, amount_at)[0]
            resources[name] = amount / RESOURCE_UNIT
    for slot, size in _TASK_SCALARS:
        if f[slot]:
            r.check(f[slot], size)
    return {
        "task_id": r.id(f[_TASK_ID]) if f[_TASK_ID] else None,
        "resources": resources,
        "dependencies": r.ids(f[_DEPENDENCIES]) if f[_DEPENDENCIES] else [],
        "actor_id": r.id(f[_ACTOR_ID]) if f[_ACTOR_ID] else None,
        "actor_creation": bool(buf[f[_ACTOR_CREATION]]) if f[_ACTOR_CREATION] else False,
        "max_concurrency": _U32.unpack_from(buf, f[_MAX_CONCURRENCY])[0]
        if f[_MAX_CONCURRENCY]
        else 1,
        "caller_id": r.id(f[_CALLER_ID]) if f[_CALLER_ID] else None,
        "sequence_no": _U64.unpack_from(buf, f[_SEQUENCE_NO])[0] if f[_SEQUENCE_NO] else 0,
        "payload": r.blob(f[_PAYLOAD]) if f[_PAYLOAD] else b"",
        "return_ids": r.ids(f[_RETURN_IDS]) if f[_RETURN_IDS] else [],
        "max_retries": _I32.unpack_from(buf, f[_MAX_RETRIES])[0] if f[_MAX_RETRIES] else 0,
        "actor_handles": r.ids(f[_ACTOR_HANDLES]) if f[_ACTOR_HANDLES] else [],
        "runtime_env": r.string(f[_RUNTIME_ENV]) if f[_RUNTIME_ENV] else "",
    }


def read_forward_batch(buf: bytes) -> tuple[list[dict[str, Any]], bool]:
    """``([{"origin", "task", "pushed"}, ...], in_order)`` of a ForwardBatchRequest, the
    values the codec would give (``task`` None when absent).

    Raises:
        ValueError: the buffer is not a well-formed ForwardBatchRequest.
    """
    r = _Reader(buf)
    tasks_at, order_at = r.table(r.u32(0), 2)
    in_order = False
    if order_at:
        r.check(order_at, 1)
        in_order = bool(buf[order_at])
    tasks = []
    if tasks_at:
        origins: dict[int, str] = {}  # shared strings are read once
        for item in r.offsets(tasks_at):
            origin_at, task_at, pushed_at = r.table(item, 3)
            origin = ""
            if origin_at:
                target = r.deref(origin_at)
                if target not in origins:
                    origins[target] = r.string(origin_at)
                origin = origins[target]
            task = _read_task(r, r.deref(task_at)) if task_at else None
            pushed = r.ids(pushed_at) if pushed_at else []
            tasks.append({"origin": origin, "task": task, "pushed": pushed})
    return tasks, in_order


# ---- FetchObjectsReply ------------------------------------------------------------------


def write_fetch_reply(
    present: Sequence[bool], objects: Sequence[tuple[bytes, bytes, bytes]]
) -> bytes:
    """A FetchObjectsReply: a flag a requested id, and ``(object_id, metadata, data)`` of
    the objects sent whole.

    Raises:
        ValueError: an id is not ID_SIZE bytes.
    """
    w = _Writer()
    root, at = w.table([(0, 4, _PTR), (1, 4, _PTR)])
    w.patch(0, root)
    w.patch(at[0], w.vector(len(present), bytes(1 if p else 0 for p in present)))
    vec = w.vector(len(objects), _PTR * len(objects))
    w.patch(at[1], vec)
    for i, (oid, meta, data) in enumerate(objects):
        fields = [(1, 4, _PTR), (2, 4, _PTR), _id_field(0, oid)]
        pos, fat = w.table(fields)
        w.patch(vec + 4 + 4 * i, pos)
        w.patch(fat[1], w.vector(len(meta), bytes(meta)))
        w.patch(fat[2], w.vector(len(data), bytes(data)))
    return bytes(w.buf)


def read_fetch_reply(buf: bytes) -> tuple[list[bool], list[tuple[bytes | None, bytes, bytes]]]:
    """``(present, [(object_id, metadata, data), ...])`` of a FetchObjectsReply
    (``object_id`` None when absent).

    Raises:
        ValueError: the buffer is not a well-formed FetchObjectsReply.
    """
    r = _Reader(buf)
    present_at, objects_at = r.table(r.u32(0), 2)
    present = [bool(b) for b in r.blob(present_at)] if present_at else []
    objects = []
    if objects_at:
        for item in r.offsets(objects_at):
            id_at, meta_at, data_at = r.table(item, 3)
            objects.append(
                (
                    r.id(id_at) if id_at else None,
                    r.blob(meta_at) if meta_at else b"",
                    r.blob(data_at) if data_at else b"",
                )
            )
    return present, objects


# ---- ForwardBatchReply ------------------------------------------------------------------


def write_forward_replies(replies: Sequence[str | None]) -> bytes:
    """A ForwardBatchReply: one ForwardTaskReply a task, accepted (None) or refused with
    the reason given."""
    w = _Writer()
    root, at = w.table([(0, 4, _PTR)])
    w.patch(0, root)
    vec = w.vector(len(replies), _PTR * len(replies))
    w.patch(at[0], vec)
    for i, why in enumerate(replies):
        if why is None:
            pos, _ = w.table([(0, 1, b"\x01")])
        else:
            pos, rat = w.table([(1, 4, _PTR)] if why else [])
            if why:
                w.patch(rat[1], w.string(why))
        w.patch(vec + 4 + 4 * i, pos)
    return bytes(w.buf)


def read_forward_replies(buf: bytes) -> list[str | None]:
    """The replies of a ForwardBatchReply: None for an accepted task, else the reason.

    Raises:
        ValueError: the buffer is not a well-formed ForwardBatchReply.
    """
    r = _Reader(buf)
    (replies_at,) = r.table(r.u32(0), 1)
    out: list[str | None] = []
    if replies_at:
        for item in r.offsets(replies_at):
            accepted_at, message_at = r.table(item, 2)
            if accepted_at:
                r.check(accepted_at, 1)
            if accepted_at and buf[accepted_at]:
                out.append(None)
            else:
                out.append(r.string(message_at) if message_at else "")
    return out


# ---- a vector of GcsBlob tables -----------------------------------------------------------


def blob_vector_block(blobs: Sequence[bytes]) -> bytes:
    """A vector of GcsBlob tables (``data:[ubyte]`` each) with everything it points to,
    as one block whose offsets are all relative to themselves: copied into a flatbuffers
    builder at an 8-aligned position, the vector starts at the block's first byte."""
    w = _Writer()
    w.buf = bytearray()
    vec = w.vector(len(blobs), _PTR * len(blobs))
    for i, blob in enumerate(blobs):
        pos, at = w.table([(0, 4, _PTR)])
        w.patch(vec + 4 + 4 * i, pos)
        w.patch(at[0], w.vector(len(blob), bytes(blob)))
    w.align(8)
    return bytes(w.buf)
