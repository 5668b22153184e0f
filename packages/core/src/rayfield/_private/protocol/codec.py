"""Flatbuffers encoding of the cluster's messages: the one encoder of the GCS's and the
nodes' tables (``gcs.fbs``, ``cluster.fbs``, ``node.fbs``).

Each table is described once in ``schema.SPECS`` (field name -> kind, in the order the
fields are added); ``encode`` and ``decode`` walk that description and call the
generated builder functions and accessors by name, so a field missing from the schema
fails loudly. Each table's plan (its generated functions, its children's order from
``schema.CREATE_ORDER``) is looked up once and cached. Children (strings, vectors,
nested tables) are written before their table. Tables listed in ``schema.RECORDS``
decode to the typed records of ``types.py``; others decode to dicts. Decoding never
trusts the buffer: sizes and vector lengths are checked and every exception is turned
into ``GcsInvalidRequestError``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import flatbuffers
from flatbuffers import encode as fb_encode
from flatbuffers import packer

from rayfield._private.protocol import task_wire
from rayfield._private.protocol.constants import ID_SIZE, RESOURCE_UNIT
from rayfield._private.protocol.errors import GcsInvalidRequestError
from rayfield._private.protocol.schema import (
    BLOBS,
    BOOL,
    BYTES,
    CREATE_ORDER,
    FLAGS,
    FLOAT,
    ID,
    IDS,
    INT,
    METHODS,
    RECORDS,
    RES,
    SERVICE,
    SHARED_STR,
    SPECS,
    STR,
    STREAMING_METHODS,
    STRS,
    Table,
)

__all__ = [
    "ID_SIZE",
    "METHODS",
    "RESOURCE_UNIT",
    "SERVICE",
    "SPECS",
    "STREAMING_METHODS",
    "decode",
    "decode_record",
    "encode",
    "id_struct",
    "id_vector",
    "offset_vector",
    "resource_vector",
]

_FB_PACKAGE = "rayfield.store.protocol.fb"
_SCALARS = (BOOL, INT, FLOAT)
_INLINE = (BOOL, INT, FLOAT, ID)  # written inside the table, not before it
_SCALAR_TYPE: dict[str, Callable[[Any], Any]] = {BOOL: bool, INT: int, FLOAT: float}


@cache
def _module(table: str) -> ModuleType:
    return importlib.import_module(f"{_FB_PACKAGE}.{table}")


@cache
def _camel(field: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field.split("_"))


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
    data = b"".join(ids)
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


def blob_vector(b: flatbuffers.Builder, blobs: Sequence[bytes]) -> int:
    """A vector of GcsBlob tables, one a blob: written by ``task_wire`` as one block and
    copied in (task events come thousands a second; the builder takes tens of
    microseconds a table)."""
    block = task_wire.blob_vector_block(blobs)
    _reserve(b, len(block) + 8)
    b.Prep(8, len(block))  # room for it, and it starts 8-aligned (from the end)
    b.head = b.head - len(block)
    b.Bytes[b.head : b.head + len(block)] = block
    return int(b.Offset())


def _reserve(b: flatbuffers.Builder, room: int) -> None:
    """Grow ``b``'s buffer at once to leave at least ``room`` bytes free, as its own
    doubling would (the written bytes move to the end of a buffer twice as large, or
    more), with one copy instead of one a doubling."""
    if b.head >= room:
        return
    old = len(b.Bytes)
    size = old * 2
    while size - (old - b.head) < room:
        size *= 2
    if size > flatbuffers.Builder.MAX_BUFFER_SIZE:
        return  # Prep raises its usual error
    grown = bytearray(size)
    grown[size - old :] = b.Bytes
    b.Bytes = grown
    b.head += size - old


def id_struct(b: flatbuffers.Builder, oid: bytes) -> int:
    """An inline UniqueID struct (to pass to the table's ``Add`` right away).

    Raises:
        GcsInvalidRequestError: when ``oid`` is not ID_SIZE bytes.
    """
    if len(oid) != ID_SIZE:
        raise GcsInvalidRequestError(f"an id must be {ID_SIZE} bytes, got {len(oid)}")
    b.Prep(1, ID_SIZE)
    b.head = b.head - ID_SIZE
    b.Bytes[b.head : b.head + ID_SIZE] = oid
    return int(b.Offset())


def _attribute(record: Any, field: str) -> Any:
    return getattr(record, field, None)


@dataclass(frozen=True)
class _Plan:
    """How to write one table: its children in creation order, its fields in add order
    with the generated ``Add`` function of each, and its ``Start`` and ``End``."""

    children: tuple[tuple[str, Any], ...]
    fields: tuple[tuple[str, Any, Callable[..., Any]], ...]
    start: Callable[[flatbuffers.Builder], None]
    end: Callable[[flatbuffers.Builder], int]


@cache
def _plan(table: str) -> _Plan:
    spec, mod = SPECS[table], _module(table)
    order = CREATE_ORDER.get(table) or tuple(spec)
    return _Plan(
        children=tuple((f, spec[f]) for f in order if spec[f] not in _INLINE),
        fields=tuple((f, kind, getattr(mod, f"{table}Add{_camel(f)}")) for f, kind in spec.items()),
        start=getattr(mod, f"{table}Start"),
        end=getattr(mod, f"{table}End"),
    )


def _child(b: flatbuffers.Builder, kind: Any, value: Any) -> int:
    """Write a child (string, vector, nested table) of kind ``kind``; its offset."""
    if kind == BYTES:
        return int(b.CreateByteVector(bytes(value)))
    if kind == IDS:
        return id_vector(b, value)
    if kind == STR:
        return int(b.CreateString(value))
    if kind == SHARED_STR:
        return int(b.CreateSharedString(value))
    if kind == RES:
        return resource_vector(b, value)
    if kind == FLAGS:
        return int(b.CreateByteVector(bytes(bytearray(1 if v else 0 for v in value))))
    if kind == STRS:
        return offset_vector(b, [b.CreateString(s) for s in value])
    if kind == BLOBS:
        return blob_vector(b, value)
    assert isinstance(kind, Table)
    if kind.many:
        return offset_vector(b, [_build(b, kind.name, x) for x in value])
    return _build(b, kind.name, value)


def _build(b: flatbuffers.Builder, table: str, values: Any) -> int:
    plan = _plan(table)
    get: Callable[[str], Any] = (
        values.get if isinstance(values, dict) else functools.partial(_attribute, values)
    )

    offsets: dict[str, int] = {}
    for field, kind in plan.children:
        value = get(field)
        if value is not None:
            offsets[field] = _child(b, kind, value)
    plan.start(b)
    for field, kind, add in plan.fields:
        if field in offsets:
            add(b, offsets[field])
        elif kind in _INLINE and (value := get(field)) is not None:
            add(b, id_struct(b, value) if kind == ID else _SCALAR_TYPE[kind](value))
    return int(plan.end(b))


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


def _reader(field: str, kind: Any) -> Callable[[Any], Any]:
    """A function reading ``field`` (of kind ``kind``) from a generated table object."""
    name = _camel(field)
    if kind in (STR, SHARED_STR):
        return lambda obj: _str(getattr(obj, name)())
    if kind == BYTES:
        return lambda obj: _bytes(getattr(obj, name + "AsNumpy")())
    if kind in _SCALARS:
        cast = _SCALAR_TYPE[kind]
        return lambda obj: cast(getattr(obj, name)())
    if kind == ID:

        def read_id(obj: Any) -> bytes | None:
            struct = getattr(obj, name)()
            return None if struct is None else bytes(struct.BytesAsNumpy().tobytes())

        return read_id
    if isinstance(kind, Table) and not kind.many:

        def read_table(obj: Any) -> Any:
            sub = getattr(obj, name)()
            return None if sub is None else _read(kind.name, sub)

        return read_table
    return lambda obj: _read_vector(obj, name, kind)


def _read_vector(obj: Any, name: str, kind: Any) -> Any:
    n = _length(obj, name)
    if kind == IDS:
        if n == 0:
            return []
        start = _element(obj, name, 0)._tab.Pos
        raw = bytes(obj._tab.Bytes[start : start + ID_SIZE * n])
        if len(raw) != ID_SIZE * n:
            raise ValueError(f"vector {name} runs past the end of the buffer")
        return [raw[i : i + ID_SIZE] for i in range(0, len(raw), ID_SIZE)]
    if kind == FLAGS:
        return [bool(v) for v in getattr(obj, name + "AsNumpy")().tobytes()] if n else []
    if kind == RES:
        out = {}
        for j in range(n):
            item = _element(obj, name, j)
            out[_str(item.Name())] = int(item.Amount()) / RESOURCE_UNIT
        return out
    if kind == STRS:
        return [_str(_element(obj, name, j)) for j in range(n)]
    if kind == BLOBS:
        return [_blob(_element(obj, name, j)) for j in range(n)]
    assert isinstance(kind, Table)
    return [_read(kind.name, _element(obj, name, j)) for j in range(n)]


def _blob(item: Any) -> bytes:
    """The data of a GcsBlob table object, sliced from its buffer (its one field,
    ``data``, has vtable slot 4), without a numpy array between."""
    tab = item._tab
    o = tab.Offset(4)
    if not o:
        return b""
    start, n = tab.Vector(o), tab.VectorLen(o)
    if n < 0 or start + n > len(tab.Bytes):
        raise ValueError(f"a blob of {n} bytes at {start} runs past the end of the buffer")
    return bytes(tab.Bytes[start : start + n])


@cache
def _readers(table: str) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    return tuple((field, _reader(field, kind)) for field, kind in SPECS[table].items())


def _read(table: str, obj: Any) -> Any:
    out = {field: read(obj) for field, read in _readers(table)}
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
